#!/bin/sh
# Prints plainSteps("dlock")'s two statements (driver/postgres/fast.go),
# one a line, by compiling that function alone.
set -e
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
	echo 'package main'
	echo 'import "fmt"'
	echo 'type fastStep struct { name, sql string; args []int; oids []uint32; plain *fastStep }'
	echo 'const ( oidBool = 16; oidInt8 = 20; oidText = 25 )'
	sed -n '/^func plainSteps/,/^}/p' "$here/../../driver/postgres/fast.go"
	echo 'func main() { l, u := plainSteps("dlock"); fmt.Println(l.sql); fmt.Println(u.sql) }'
} >"$tmp/main.go"
cd "$tmp" && go run main.go

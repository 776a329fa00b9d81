module github.com/dlock-go/dlock/harness

go 1.26.8

replace github.com/dlock-go/dlock => ../

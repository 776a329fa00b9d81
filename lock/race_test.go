//go:build race

package lock_test

func init() { raceEnabled = true }

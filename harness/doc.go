// Package harness is the root of dlock's test-harness module: the tooling
// that only dlock's own tests use (containers through testcontainers-go,
// the chaos and nemesis checkers, the readers of OpenTelemetry's SDK), kept
// out of the module users import so that their go.sum never lists it.
package harness

// Package observe holds the tests and the runnable example that read what
// package lock measures through OpenTelemetry's SDK (a ManualReader). They
// live in the harness module because the SDK is no dependency of dlock's
// main module, not even of its tests: a user's go.sum never lists it.
package observe

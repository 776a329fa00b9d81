// Package redismix holds the tests that need both Redis drivers at once:
// redisnx and rediswatch share their wire format (lock key, value, fencing
// counter and release channel), so holders of either exclude each other on
// the same key. Drivers may not import one another, so the proof lives
// here.
package redismix

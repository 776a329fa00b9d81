// Package doccheck holds the tests of the repository's Markdown: every
// relative link resolves, the README stays short, and the README's quick
// start is the code of the examples that driver/redisnx's tests run. It
// has no code of its own.
package doccheck

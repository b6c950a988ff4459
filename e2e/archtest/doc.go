// Package archtest holds tests that guard the architecture: which packages may import what
// (STYLE.md, practice 1). It has no code of its own.
package archtest

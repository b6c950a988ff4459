// Package version is the version and commit of Flotilla's binaries: stamped at build time by
// `flotilla image build` (-ldflags -X), or else read from the build information the Go
// toolchain records (the module version and the VCS revision of a `go build` in a checkout).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"golang.org/x/mod/semver"
)

// Set with -ldflags "-X github.com/flotilla-dev/flotilla/cmd/internal/version.version=v1.2.3 …".
var (
	version string
	commit  string
)

// Dev is the version of a binary built without one.
const Dev = "dev"

// Version is the binary's version (a semantic version such as v0.4.0, or Dev).
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && semver.IsValid(info.Main.Version) {
		return info.Main.Version
	}
	return Dev
}

// Commit is the VCS revision the binary was built from, or "unknown".
func Commit() string {
	if commit != "" {
		return commit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}

// String is what `--version` prints for the named binary.
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", binary, Version(), Commit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

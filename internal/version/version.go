// Package version says which respgate is running: the version set at link time
// (-ldflags "-X github.com/respgate/respgate/internal/version.version=v1.2.3"), else the module
// version Go recorded, and the VCS revision when the build recorded one. It must not do I/O.
package version

import (
	"runtime"
	"runtime/debug"
)

// version is set by the linker for release builds; empty means "ask the build info".
var version string

// Info is what the start-up line, --version and respgate_build_info report.
type Info struct {
	Version   string // "v1.2.3", or "(devel)" for a build from a checkout
	Revision  string // VCS commit, with "-dirty" when the tree was modified; "" when not recorded
	GoVersion string
}

// Get returns the running binary's Info.
func Get() Info {
	in := Info{Version: version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if in.Version == "" {
			in.Version = "(unknown)"
		}
		return in
	}
	if in.Version == "" {
		in.Version = bi.Main.Version
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		in.Revision = rev + dirty
	}
	return in
}

// String is the one-line form: "respgate v1.2.3 (abc123, go1.26.8)".
func (in Info) String() string {
	s := "respgate " + in.Version + " ("
	if in.Revision != "" {
		s += in.Revision + ", "
	}
	return s + in.GoVersion + ")"
}

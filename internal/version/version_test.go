package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGetNamesAVersionAndTheGoRelease(t *testing.T) {
	in := Get()
	if in.Version == "" || in.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v", in)
	}
	if s := in.String(); !strings.HasPrefix(s, "respgate "+in.Version+" (") || !strings.HasSuffix(s, runtime.Version()+")") {
		t.Errorf("String() = %q", s)
	}
}

func TestLinkTimeVersionWins(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.8.7"
	if got := Get().Version; got != "v9.8.7" {
		t.Errorf("Version = %q, want the linker's v9.8.7", got)
	}
}

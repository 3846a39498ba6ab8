package deploy

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// citeOutsideRE matches references to files a user of the repository does not have: the project
// workspace's shared folder, machine paths, and the old names of docs/wire.md and docs/design.md.
var citeOutsideRE = regexp.MustCompile(`\.\./shared/|/wor[k]/|\bCONTRACT(\.md| §)|\bDESIGN(\.md| §)|\bSTYLE\.md`)

// TestRepositoryCitesOnlyItsOwnFiles keeps code comments and docs pointing at docs/ in the
// repository, never at files outside it.
func TestRepositoryCitesOnlyItsOwnFiles(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasSuffix(name, ".sum") || strings.HasSuffix(name, "package-lock.json") || name == "deploy/citations_test.go" {
			continue
		}
		for i, line := range strings.Split(readRepoFile(t, name), "\n") {
			if m := citeOutsideRE.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q, a file outside the repository; cite docs/ instead", name, i+1, m)
			}
		}
	}
}

// TestRepositoryTracksNoNodeModules keeps npm installs out of git: the lockfiles are the source,
// `make compat` installs with npm ci.
func TestRepositoryTracksNoNodeModules(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(string(out), "\n") {
		if strings.Contains("/"+name, "/node_modules/") {
			t.Fatalf("%s is tracked: node_modules must stay out of the repository", name)
		}
	}
}

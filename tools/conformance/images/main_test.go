package main

import (
	"strings"
	"testing"
)

// TestRepoList: every registry the suite pulls from points at the local one; the invalid
// registry is left alone (specs expect pulls from it to fail).
func TestRepoList(t *testing.T) {
	got := RepoList("localhost/conformance")
	for _, k := range []string{"promoterE2eRegistry", "gcRegistry", "buildImageRegistry", "gcEtcdRegistry", "sigStorageRegistry"} {
		if !strings.Contains(got, k+": localhost/conformance\n") {
			t.Errorf("%s is not remapped:\n%s", k, got)
		}
	}
	if strings.Contains(got, "invalidRegistry") {
		t.Errorf("the invalid registry is remapped:\n%s", got)
	}
}

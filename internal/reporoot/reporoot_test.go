package reporoot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Find returns the directory whose go.mod declares the product module, from any folder below it.
func TestFind(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(data), "module "+ModulePath+"\n") {
		t.Fatalf("Find() = %s, whose go.mod is not the product's (%v)", root, err)
	}
	if !strings.HasSuffix(filepath.Join(root, "internal", "reporoot"), filepath.Join("internal", "reporoot")) {
		t.Fatalf("root %s", root)
	}
}

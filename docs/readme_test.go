// Package docs holds the repository's architecture (architecture.md) and the test that keeps
// the folder READMEs' maps true to the Go files they describe.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The convention every folder README follows (issue 41):
//
//  1. A directory with its own README.md names each of its Go files (non-test, not generated)
//     by base name: its file table.
//  2. A package directory without a README is named, by its path relative to the nearest README
//     above it (`pkg/grid/`, `plugin/`), in that README: its map.
//  3. Once that README lists a file of such a package by name, it lists all of them (no
//     half-maps: a tree that shows decide.go but not parallel.go is wrong). main.go alone does
//     not start a list.
//  4. Every folder README links docs/architecture.md.
//
// Generated code (zz_generated.*, apis/generated/) and _test.go files are not listed.

// TestFolderREADMEsMatchTheGoFiles checks the convention over the whole checkout.
func TestFolderREADMEsMatchTheGoFiles(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	problems, err := readmeProblems(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

var skipDirs = map[string]bool{".git": true, "_output": true, "testdata": true, "node_modules": true, "vendor": true}

// readmeProblems walks root and returns one line per README that misses something.
func readmeProblems(root string) ([]string, error) {
	goFiles := map[string][]string{} // dir (relative, "." for root) -> listed Go file base names
	readmes := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipDirs[d.Name()] || (rel != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.Dir(rel)
		switch name := d.Name(); {
		case name == "README.md":
			readmes[dir] = true
		case strings.HasSuffix(name, ".go") && listed(rel):
			goFiles[dir] = append(goFiles[dir], name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	texts := map[string]string{}
	text := func(dir string) string {
		if _, ok := texts[dir]; !ok {
			b, _ := os.ReadFile(filepath.Join(root, dir, "README.md"))
			texts[dir] = string(b)
		}
		return texts[dir]
	}
	readmePath := func(dir string) string { return filepath.ToSlash(filepath.Join(dir, "README.md")) }
	var problems []string
	for dir, files := range goFiles {
		owner := dir
		for !readmes[owner] && owner != "." {
			owner = filepath.Dir(owner)
		}
		if !readmes[owner] {
			continue // no README anywhere above: nothing to keep true
		}
		txt := text(owner)
		if owner == dir {
			for _, f := range files {
				if !mentions(txt, f) {
					problems = append(problems, readmePath(owner)+": its file table does not name "+f)
				}
			}
			continue
		}
		sub := filepath.ToSlash(mustRel(owner, dir))
		if !strings.Contains(txt, sub) {
			problems = append(problems, readmePath(owner)+": its map does not name the package directory "+sub+"/")
		}
		started := false
		for _, f := range files {
			started = started || (f != "main.go" && mentions(txt, f))
		}
		if started {
			for _, f := range files {
				if !mentions(txt, f) {
					problems = append(problems, readmePath(owner)+": lists files of "+sub+"/ but not "+f)
				}
			}
		}
	}
	for dir := range readmes {
		if dir != "." && !strings.Contains(text(dir), "docs/architecture.md") {
			problems = append(problems, readmePath(dir)+": does not link docs/architecture.md")
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// listed: a Go file a README's map describes (not a test, not generated).
func listed(rel string) bool {
	name := filepath.Base(rel)
	return !strings.HasSuffix(name, "_test.go") && !strings.HasPrefix(name, "zz_generated") &&
		!strings.Contains(filepath.ToSlash(rel), "apis/generated/")
}

// mentions: the README names the file as a word (plan.go, not planner.go's tail).
func mentions(txt, file string) bool {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(file)).MatchString(txt)
}

func mustRel(base, target string) string {
	r, err := filepath.Rel(base, target)
	if err != nil {
		panic(err)
	}
	return r
}

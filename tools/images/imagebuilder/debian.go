package imagebuilder

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// DebianSuites are the suites a DebianRoot takes its packages from: the release machine's
// Debian (bookworm), with its point and security updates, so that another architecture's nft
// is the same version as this machine's.
var DebianSuites = []string{
	"http://deb.debian.org/debian bookworm main",
	"http://deb.debian.org/debian bookworm-updates main",
	"http://deb.debian.org/debian-security bookworm-security main",
}

// debianKeyring verifies the suites' signatures (apt refuses unsigned indexes).
const debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// DebianArch is Debian's name of a Go GOARCH (linux only), "" when Debian has none.
func DebianArch(goarch string) string {
	return map[string]string{"amd64": "amd64", "arm64": "arm64", "arm": "armhf", "386": "i386",
		"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64"}[goarch]
}

// DebPackage is one Debian package of a DebianRoot.
type DebPackage struct{ Name, Version, Arch string }

func (p DebPackage) String() string { return p.Name + ":" + p.Arch + "=" + p.Version }

// DebianRootOptions say what DebianRoot fetches and where it keeps it.
type DebianRootOptions struct {
	// CacheDir holds the private apt state (apt-<arch>/: sources, lists, no machine
	// configuration touched), the downloaded .debs (debs-<arch>/) and the extracted trees
	// (<arch>-<key>/root, key: the packages and their versions).
	CacheDir string
	// Arch is Debian's architecture (DebianArch).
	Arch string
	// Files are the executables wanted (absolute paths, e.g. /usr/sbin/nft); the package of
	// each is the one that owns it on this machine (dpkg-query -S: a Debian package has the
	// same name on every architecture).
	Files []string
	// Offline uses only what CacheDir holds: no apt-get update, no download; a missing
	// index, .deb or tree is an error (ErrNotCached).
	Offline bool
	// Logf reports progress (nil: silent).
	Logf func(format string, args ...any)
}

// ErrNotCached is DebianRoot's error in Offline mode when the cache lacks something.
var ErrNotCached = errors.New("not in the cache")

// DebianRoot returns a root filesystem of Debian's packages of another architecture with
// o.Files and every shared library they need, and those packages. The set of packages is
// resolved from the ELF files themselves: the packages owning o.Files first; then, while an
// ELF file reachable from o.Files (DT_NEEDED and PT_INTERP, transitively, as RootfsLayer
// walks them) needs a library no fetched package has, the Depends and Pre-Depends of the
// package owning that file (Debian's shlibs make the package of every needed library one of
// them). The tree is cached by architecture and package versions: a second call with the
// same candidate versions downloads nothing but apt's index check.
func DebianRoot(o DebianRootOptions) (string, []DebPackage, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cache, err := filepath.Abs(o.CacheDir)
	if err != nil {
		return "", nil, err
	}
	a := &aptDir{dir: filepath.Join(cache, "apt-"+o.Arch), arch: o.Arch}
	if err := a.setup(); err != nil {
		return "", nil, err
	}
	if o.Offline {
		if _, err := os.Stat(a.lists()); err != nil {
			return "", nil, fmt.Errorf("apt lists of %s: %w", o.Arch, ErrNotCached)
		}
	} else {
		if out, err := a.run("apt-get", "-q", "update"); err != nil {
			return "", nil, fmt.Errorf("apt-get update (%s): %v\n%s", o.Arch, err, out)
		}
	}
	var roots []string
	for _, f := range o.Files {
		pkg, err := owningPackage(f)
		if err != nil {
			return "", nil, err
		}
		roots = append(roots, pkg)
	}

	// The last resolution's package list: when every one of them is still the candidate
	// version and its tree is complete, that tree is the answer.
	// (Per set of files: another set may need other packages.)
	filesSum := sha256.Sum256([]byte(strings.Join(o.Files, "\n")))
	resolvedFile := filepath.Join(cache, o.Arch+"-"+hex.EncodeToString(filesSum[:4])+".packages")
	if prev, err := os.ReadFile(resolvedFile); err == nil {
		names := strings.Fields(string(prev))
		if pkgs, err := a.candidates(names); err == nil {
			root := filepath.Join(cache, o.Arch+"-"+treeKey(pkgs), "root")
			if _, err := os.Stat(filepath.Join(filepath.Dir(root), "complete")); err == nil {
				logf("%s: cached tree %s (%s)", o.Arch, root, joinPackages(pkgs))
				return root, pkgs, nil
			}
		}
	}
	if o.Offline {
		return "", nil, fmt.Errorf("a tree of %s for %s: %w", o.Arch, strings.Join(o.Files, ", "), ErrNotCached)
	}

	work, err := os.MkdirTemp(cache, o.Arch+"-resolving-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(work)
	r := &resolver{apt: a, debs: filepath.Join(cache, "debs-"+o.Arch), root: filepath.Join(work, "root"),
		owner: map[string]string{}, fetched: map[string]DebPackage{}, logf: logf}
	for _, p := range roots {
		if err := r.fetch(p); err != nil {
			return "", nil, err
		}
	}
	for {
		c := &collector{rootfs: r.root, entries: map[string]*tar.Header{}, contents: map[string][]byte{}, missing: &[]missingLib{}}
		for _, f := range o.Files {
			if err := c.add(f); err != nil {
				return "", nil, fmt.Errorf("%s in %s's packages: %w", f, o.Arch, err)
			}
		}
		if len(*c.missing) == 0 {
			break
		}
		fetchedBefore := len(r.fetched)
		for _, m := range *c.missing {
			for _, d := range r.depends[r.owner[m.file]] {
				if _, done := r.fetched[d]; !done {
					if err := r.fetch(d); err != nil {
						return "", nil, err
					}
				}
			}
		}
		if len(r.fetched) == fetchedBefore {
			m := (*c.missing)[0]
			pkg := r.owner[m.file]
			return "", nil, fmt.Errorf("%s: library %s (needed by %s of package %s) is in none of its dependencies %v", o.Arch, m.soname, m.file, pkg, r.depends[pkg])
		}
	}
	var pkgs []DebPackage
	var names []string
	for _, p := range r.fetched {
		pkgs = append(pkgs, p)
		names = append(names, p.Name)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	sort.Strings(names)
	final := filepath.Join(cache, o.Arch+"-"+treeKey(pkgs))
	if err := os.RemoveAll(final); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(final, 0o755); err != nil {
		return "", nil, err
	}
	if err := os.Rename(r.root, filepath.Join(final, "root")); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(final, "complete"), []byte(joinPackages(pkgs)+"\n"), 0o644); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(resolvedFile, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return "", nil, err
	}
	logf("%s: tree %s (%s)", o.Arch, filepath.Join(final, "root"), joinPackages(pkgs))
	return filepath.Join(final, "root"), pkgs, nil
}

func treeKey(pkgs []DebPackage) string {
	sum := sha256.Sum256([]byte(joinPackages(pkgs)))
	return hex.EncodeToString(sum[:8])
}

func joinPackages(pkgs []DebPackage) string {
	s := make([]string, len(pkgs))
	for i, p := range pkgs {
		s[i] = p.String()
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// owningPackage is the package of file on this machine (its name, the same on every
// architecture).
func owningPackage(file string) (string, error) {
	out, err := exec.Command("dpkg-query", "-S", file).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query -S %s: no package of this machine owns it (tools/deps: install it): %w", file, err)
	}
	return ParseDpkgSearch(string(out), file)
}

// ParseDpkgSearch is the package of file in `dpkg-query -S file`'s output ("pkg[:arch]: path",
// "pkg1, pkg2: path" for a shared directory: refused).
func ParseDpkgSearch(out, file string) (string, error) {
	for _, line := range strings.Split(out, "\n") {
		pkgs, path, ok := strings.Cut(line, ": ")
		if !ok || strings.TrimSpace(path) != file || strings.HasPrefix(pkgs, "diversion by ") {
			continue
		}
		if strings.Contains(pkgs, ",") {
			return "", fmt.Errorf("%s belongs to several packages (%s)", file, pkgs)
		}
		name, _, _ := strings.Cut(strings.TrimSpace(pkgs), ":")
		return name, nil
	}
	return "", fmt.Errorf("dpkg-query -S %s: no package names it: %q", file, out)
}

// ParseDepends is the package names of a Depends or Pre-Depends field: version constraints
// and architecture qualifiers dropped, the first of each set of alternatives.
func ParseDepends(field string) []string {
	var out []string
	for _, dep := range strings.Split(field, ",") {
		alt, _, _ := strings.Cut(dep, "|")
		name := strings.Fields(alt)
		if len(name) == 0 {
			continue
		}
		n, _, _ := strings.Cut(name[0], ":")
		out = append(out, n)
	}
	return out
}

// ParseControl is the fields of one Debian control stanza (continuation lines joined).
func ParseControl(stanza string) map[string]string {
	fields := map[string]string{}
	last := ""
	for _, line := range strings.Split(stanza, "\n") {
		if line == "" {
			break
		}
		if (line[0] == ' ' || line[0] == '\t') && last != "" {
			fields[last] += "\n" + strings.TrimSpace(line)
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = k
		fields[k] = strings.TrimSpace(v)
	}
	return fields
}

// aptDir is a private apt: its own sources, lists, cache and (empty) dpkg status, one
// architecture, so that neither the machine's apt configuration nor its dpkg architectures
// change (its apt.conf.d, e.g. a proxy, still applies).
type aptDir struct{ dir, arch string }

func (a *aptDir) lists() string { return filepath.Join(a.dir, "state", "lists") }

func (a *aptDir) setup() error {
	for _, d := range []string{"etc/sources.list.d", "etc/preferences.d", "state/lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return err
		}
	}
	var sources strings.Builder
	for _, s := range DebianSuites {
		fmt.Fprintf(&sources, "deb [signed-by=%s] %s\n", debianKeyring, s)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "etc", "sources.list"), []byte(sources.String()), 0o644); err != nil {
		return err
	}
	status := filepath.Join(a.dir, "state", "status")
	if _, err := os.Stat(status); err != nil {
		return os.WriteFile(status, nil, 0o644)
	}
	return nil
}

func (a *aptDir) options() []string {
	var o []string
	for _, kv := range []string{
		"Dir::Etc::SourceList=" + filepath.Join(a.dir, "etc", "sources.list"),
		"Dir::Etc::SourceParts=" + filepath.Join(a.dir, "etc", "sources.list.d"),
		"Dir::Etc::Preferences=" + filepath.Join(a.dir, "etc", "preferences"),
		"Dir::Etc::PreferencesParts=" + filepath.Join(a.dir, "etc", "preferences.d"),
		"Dir::State=" + filepath.Join(a.dir, "state"),
		"Dir::State::status=" + filepath.Join(a.dir, "state", "status"),
		"Dir::Cache=" + filepath.Join(a.dir, "cache"),
		// apt's binary cache in the private directory (a container's docker-clean turns it
		// off, which makes every apt-cache call parse the index again, a second each).
		"Dir::Cache::pkgcache=pkgcache.bin",
		"Dir::Cache::srcpkgcache=srcpkgcache.bin",
		"APT::Architecture=" + a.arch,
		"APT::Architectures=" + a.arch,
		"Acquire::Languages=none",
		// The private directories are root's when the release runs as root; apt's _apt
		// sandbox user could not write them.
		"APT::Sandbox::User=" + currentUser(),
	} {
		o = append(o, "-o", kv)
	}
	return o
}

func currentUser() string {
	if os.Getuid() == 0 {
		return "root"
	}
	return "_apt"
}

// run runs an apt tool (apt-get, apt-cache) with the private configuration.
func (a *aptDir) run(tool string, args ...string) ([]byte, error) {
	cmd := exec.Command(tool, append(a.options(), args...)...)
	cmd.Dir = a.dir
	return cmd.CombinedOutput()
}

// candidates are the candidate versions of names for the architecture (one apt-cache call).
func (a *aptDir) candidates(names []string) ([]DebPackage, error) {
	args := append(a.options(), "show", "--no-all-versions")
	for _, n := range names {
		args = append(args, n+":"+a.arch)
	}
	out, err := exec.Command("apt-cache", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache show %s: %w", strings.Join(names, " "), err)
	}
	found := map[string]DebPackage{}
	for _, stanza := range strings.Split(string(out), "\n\n") {
		if f := ParseControl(strings.TrimLeft(stanza, "\n")); f["Package"] != "" {
			found[f["Package"]] = DebPackage{Name: f["Package"], Version: f["Version"], Arch: f["Architecture"]}
		}
	}
	var pkgs []DebPackage
	for _, n := range names {
		p, ok := found[n]
		if !ok || p.Version == "" {
			return nil, fmt.Errorf("apt-cache show: no candidate of %s:%s", n, a.arch)
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

func (a *aptDir) show(name string) (map[string]string, error) {
	cmd := exec.Command("apt-cache", append(a.options(), "show", "--no-all-versions", name+":"+a.arch)...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache show %s:%s: %w", name, a.arch, err)
	}
	f := ParseControl(string(out))
	if f["Package"] != name || f["Version"] == "" {
		return nil, fmt.Errorf("apt-cache show %s:%s: no such package: %q", name, a.arch, out)
	}
	return f, nil
}

// resolver fetches packages into one tree, remembering which package owns each path and what
// each depends on.
type resolver struct {
	apt     *aptDir
	debs    string
	root    string
	owner   map[string]string // path in the tree -> package
	depends map[string][]string
	fetched map[string]DebPackage
	logf    func(string, ...any)
}

// fetch downloads name's candidate (unless debs/ has that version) and extracts it into the
// tree and, to know which package owns a file, into a directory of its own.
func (r *resolver) fetch(name string) error {
	f, err := r.apt.show(name)
	if err != nil {
		return err
	}
	p := DebPackage{Name: name, Version: f["Version"], Arch: f["Architecture"]}
	if r.depends == nil {
		r.depends = map[string][]string{}
	}
	r.depends[name] = append(ParseDepends(f["Pre-Depends"]), ParseDepends(f["Depends"])...)
	if err := os.MkdirAll(r.debs, 0o755); err != nil {
		return err
	}
	deb := filepath.Join(r.debs, name+"_"+strings.ReplaceAll(p.Version, ":", "%3a")+"_"+p.Arch+".deb")
	if _, err := os.Stat(deb); err != nil {
		tmp, err := os.MkdirTemp(r.debs, "download-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("apt-get", append(r.apt.options(), "-q", "download", name+":"+r.apt.arch+"="+p.Version)...)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get download %s: %v\n%s", p, err, out)
		}
		got, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(got) != 1 {
			return fmt.Errorf("apt-get download %s: %d files", p, len(got))
		}
		if err := os.Rename(got[0], deb); err != nil {
			return err
		}
		r.logf("%s: downloaded %s", r.apt.arch, filepath.Base(deb))
	}
	own := filepath.Join(filepath.Dir(r.root), "packages", name)
	for _, dir := range []string{own, r.root} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
	}
	err = filepath.Walk(own, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, err := filepath.Rel(own, path)
		if err != nil {
			return err
		}
		r.owner["/"+filepath.ToSlash(rel)] = name
		return nil
	})
	if err != nil {
		return err
	}
	r.fetched[name] = p
	return nil
}

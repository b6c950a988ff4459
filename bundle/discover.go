package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Source is one bundle found in a checkout.
type Source struct {
	// Name is the bundle name: fleet.yaml's name, or derived from the repository and path.
	Name string
	// Dir is the bundle directory relative to the checkout root, with forward slashes.
	Dir string
	// FleetFile is the fleet.yaml path relative to the root, or "" when the bundle has none.
	FleetFile string
	Fleet     FleetYAML
	// Nested are directories below Dir that are bundles of their own and not part of this one.
	Nested []string
	// Err is why the bundle's fleet.yaml does not decode; Render returns it. The bundle is
	// still found, named by its directory, so that one broken bundle fails alone.
	Err error
}

// FleetFileName is the name of a bundle's configuration file.
const FleetFileName = "fleet.yaml"

// maxBundleName is the longest valid Helm release name; bundle names become release names.
const maxBundleName = 53

// Discover finds the bundles of a checkout (Rancher Fleet's rules): every directory matched by
// paths (globs relative to the root; default the root) is a bundle, and so is every directory
// below it with a fleet.yaml. A nested bundle's files belong to it alone. Directories whose
// name starts with "." are skipped, and so is overlays/, which holds yaml overlays.
func Discover(root, repoName string, paths []string) ([]Source, error) {
	c, err := OpenCheckout(root)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Discover(repoName, paths)
}

// Discover finds the bundles of the checkout, as the function Discover does.
func (c *Checkout) Discover(repoName string, paths []string) ([]Source, error) {
	if len(paths) == 0 {
		paths = []string{"."}
	}
	dirs := map[string]bool{}
	for _, p := range paths {
		if filepath.IsAbs(p) || strings.HasPrefix(p, "/") {
			p = strings.TrimLeft(p, "/")
			if p == "" {
				p = "."
			}
		}
		clean := path.Clean(filepath.ToSlash(p))
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, fmt.Errorf("paths: %q leaves the repository", p)
		}
		matches, err := c.Glob(clean)
		if escapes(err) {
			return nil, fmt.Errorf("paths: %q: %w", p, err)
		}
		if err != nil {
			return nil, fmt.Errorf("paths: invalid glob %q: %w", p, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("paths: %q matches nothing in the repository", p)
		}
		for _, m := range matches {
			if !c.IsDir(m) {
				continue // a glob may match files too; only directories are bundles
			}
			// A bundle is named by where its files are: a matched symlink to a directory
			// inside the checkout is the directory it points to.
			real, err := c.Resolve(m)
			if err != nil {
				return nil, fmt.Errorf("paths: %q: %w", p, err)
			}
			dirs[real] = true
			if err := c.findFleetDirs(real, dirs); err != nil {
				return nil, fmt.Errorf("paths: %q: %w", p, err)
			}
		}
	}
	var sources []Source
	for dir := range dirs {
		src := Source{Dir: dir}
		fleetPath := path.Join(dir, FleetFileName)
		if data, err := c.ReadFile(fleetPath, maxFileSize); err == nil {
			src.FleetFile = path.Join(dir, FleetFileName)
			if f, err := DecodeFleetYAML(src.FleetFile, data); err != nil {
				src.Err = err
			} else {
				src.Fleet = *f
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", fleetPath, err)
		}
		sources = append(sources, src)
	}
	sort.Slice(sources, func(i, j int) bool { return sources[i].Dir < sources[j].Dir })
	for i := range sources {
		for j := range sources {
			if i != j && isBelow(sources[i].Dir, sources[j].Dir) {
				sources[i].Nested = append(sources[i].Nested, sources[j].Dir)
			}
		}
	}
	// A matched directory without fleet.yaml whose files all belong to nested bundles is no
	// bundle of its own.
	kept := sources[:0]
	for _, s := range sources {
		if s.FleetFile != "" || c.hasOwnContent(&s) {
			kept = append(kept, s)
		}
	}
	return kept, assignNames(repoName, kept)
}

// hasOwnContent reports whether a bundle directory holds anything to deploy outside its nested
// bundles: a chart, a kustomization or manifests.
func (c *Checkout) hasOwnContent(s *Source) bool {
	if c.IsFile(path.Join(s.Dir, "Chart.yaml")) || c.hasKustomization(s.Dir) {
		return true
	}
	files, err := c.manifestFiles(s, nil)
	return err != nil || len(files) > 0
}

// findFleetDirs adds every directory below dir that holds a fleet.yaml.
func (c *Checkout) findFleetDirs(dir string, dirs map[string]bool) error {
	return c.Walk(dir, func(p string, info fs.FileInfo, err error) error {
		if escapes(err) {
			return nil // nothing is read through it; a bundle that uses it fails with its name
		}
		if err != nil {
			return err
		}
		if info.IsDir() && p != dir && (strings.HasPrefix(path.Base(p), ".") || path.Base(p) == "overlays") {
			return fs.SkipDir
		}
		if !info.IsDir() && path.Base(p) == FleetFileName {
			real, err := c.Resolve(path.Dir(p))
			if err != nil {
				return err
			}
			dirs[real] = true
		}
		return nil
	})
}

// isBelow reports whether dir is strictly below parent.
func isBelow(parent, dir string) bool {
	if parent == "." {
		return dir != "."
	}
	return strings.HasPrefix(dir, parent+"/")
}

var invalidNameChars = regexp.MustCompile(`[^a-z0-9-]+`)

// BundleName derives a bundle name from the repository name and the bundle's directory: lower
// case, every other character a dash, at most 53 characters, with a hash of the full name when
// it had to be shortened.
func BundleName(repoName, dir string) string {
	full := repoName
	if dir != "." && dir != "" {
		full += "-" + dir
	}
	name := strings.Trim(invalidNameChars.ReplaceAllString(strings.ToLower(full), "-"), "-")
	if name == "" {
		name = "bundle"
	}
	if len(name) <= maxBundleName {
		return name
	}
	return strings.TrimRight(name[:maxBundleName-9], "-") + "-" + shortHash(full)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// assignNames gives every source its name; explicit names must be valid and unique, derived
// names that collide get a hash of their directory.
func assignNames(repoName string, sources []Source) error {
	byName := map[string]int{}
	for i := range sources {
		s := &sources[i]
		if s.Fleet.Name != "" {
			if len(s.Fleet.Name) > maxBundleName || !validName.MatchString(s.Fleet.Name) {
				return &FieldError{File: s.FleetFile, Field: "name", Message: fmt.Sprintf("%q is not a valid bundle name: lower-case letters, digits and dashes, at most %d characters", s.Fleet.Name, maxBundleName)}
			}
			s.Name = s.Fleet.Name
		} else {
			s.Name = BundleName(repoName, s.Dir)
		}
	}
	for i := range sources {
		s := &sources[i]
		if prev, dup := byName[s.Name]; dup {
			other := &sources[prev]
			if s.Fleet.Name != "" && other.Fleet.Name != "" {
				return &FieldError{File: s.FleetFile, Field: "name", Message: fmt.Sprintf("%q is also the name of the bundle in %s", s.Name, other.Dir)}
			}
			if s.Fleet.Name == "" {
				s.Name = strings.TrimRight(truncate(s.Name, maxBundleName-9), "-") + "-" + shortHash(s.Dir)
			} else {
				other.Name = strings.TrimRight(truncate(other.Name, maxBundleName-9), "-") + "-" + shortHash(other.Dir)
				byName[other.Name] = prev
			}
		}
		byName[s.Name] = i
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

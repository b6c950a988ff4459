// Package image builds Flotilla's container images from static Go binaries with
// go-containerregistry: no container daemon, no base image to pull, and the same commit gives the
// same digest. Each image is a multi-platform OCI index; each platform's image holds two layers:
//
//	base    /etc/passwd and /etc/group (user nonroot, 65532), /etc/ssl/certs/ca-certificates.crt
//	        (the NSS roots of golang.org/x/crypto/x509roots), /tmp and /home/nonroot
//	binary  /usr/local/bin/<name>, the entrypoint
//
// There is no shell. The image runs as 65532:65532 and carries the OCI labels source, revision
// and version. Every file has the commit's time and root ownership, so nothing of the machine
// that built it leaks into the digest.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Source is the repository the images' labels name.
const Source = "https://github.com/flotilla-dev/flotilla"

// versionPackage is where -ldflags -X stamps the version and commit.
const versionPackage = "github.com/flotilla-dev/flotilla/cmd/internal/version"

// NonRoot is the user and group the images run as.
const NonRoot = 65532

// Binary is one program to put in an image.
type Binary struct {
	// Name of the binary and the image, e.g. flotilla-agent.
	Name string
	// Package to build, e.g. ./cmd/flotilla-agent.
	Package string
}

// Binaries are Flotilla's images.
var Binaries = []Binary{{Name: "flotilla-hub", Package: "./cmd/flotilla-hub"}, {Name: "flotilla-agent", Package: "./cmd/flotilla-agent"}}

// DefaultPlatforms are the platforms every image is built for.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Options say what to build and how to stamp it.
type Options struct {
	// ModuleDir is the checkout to build in.
	ModuleDir string
	// Platforms to build for; default DefaultPlatforms.
	Platforms []v1.Platform
	// Stamp is stamped into the binaries and the labels; its Created is the time of every
	// file and of the image config: the commit's time keeps builds reproducible.
	Stamp
	// Log, when set, is told what is being built.
	Log func(format string, args ...any)
}

// Build compiles bin for every platform and returns the image index.
func Build(ctx context.Context, opts Options, bin Binary) (v1.ImageIndex, error) {
	platforms := opts.Platforms
	if len(platforms) == 0 {
		platforms = DefaultPlatforms
	}
	base, err := baseLayer(opts.Created)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "flotilla-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		out := filepath.Join(work, p.OS+"-"+p.Architecture, bin.Name)
		if err := compile(ctx, opts, bin, p, out); err != nil {
			return nil, err
		}
		img, err := platformImage(opts, bin, p, base, out)
		if err != nil {
			return nil, fmt.Errorf("%s for %s/%s: %w", bin.Name, p.OS, p.Architecture, err)
		}
		platform := p
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// compile builds a static binary for one platform, stamped with the version and commit.
// -trimpath and an empty build id make it depend on the sources and the toolchain only.
func compile(ctx context.Context, opts Options, bin Binary, p v1.Platform, out string) error {
	if opts.Log != nil {
		opts.Log("building %s for %s/%s", bin.Name, p.OS, p.Architecture)
	}
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.version=%s -X %s.commit=%s", versionPackage, opts.Version, versionPackage, opts.Commit)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, bin.Package)
	cmd.Dir = opts.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-mod=readonly")
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", bin.Package, p.OS, p.Architecture, err, output)
	}
	return nil
}

func platformImage(opts Options, bin Binary, p v1.Platform, base v1.Layer, binary string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarLayer([]file{{name: "usr/local/bin/" + bin.Name, mode: 0o755, data: data}}, opts.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, base, layer); err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = v1.Time{Time: opts.Created}
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Entrypoint: []string{"/usr/local/bin/" + bin.Name},
		WorkingDir: "/home/nonroot",
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels: map[string]string{
			"org.opencontainers.image.source":   Source,
			"org.opencontainers.image.revision": opts.Commit,
			"org.opencontainers.image.version":  opts.Version,
			"org.opencontainers.image.title":    bin.Name,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cfg)
}

// baseLayer holds what every image needs besides its binary.
func baseLayer(created time.Time) (v1.Layer, error) {
	var roots bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue // a distrust-after constraint cannot be written into a PEM bundle
		}
		if err := pem.Encode(&roots, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	nonroot := fmt.Sprint(NonRoot)
	return tarLayer([]file{
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:" + nonroot + ":\n")},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: roots.Bytes()},
		{name: "home/nonroot/", mode: 0o700, uid: NonRoot},
		{name: "tmp/", mode: 0o1777},
	}, created)
}

// file is one entry of a layer; a name ending in / is a directory.
type file struct {
	name string
	mode int64
	uid  int
	data []byte
}

// tarLayer writes files, with their parent directories, in a fixed order and with fixed
// times and owners, as a gzipped layer.
func tarLayer(files []file, created time.Time) (v1.Layer, error) {
	dirs := map[string]bool{}
	var entries []file
	for _, f := range files {
		parts := strings.Split(strings.TrimSuffix(f.name, "/"), "/")
		for i := 1; i < len(parts); i++ {
			if d := strings.Join(parts[:i], "/") + "/"; !dirs[d] {
				dirs[d] = true
				entries = append(entries, file{name: d, mode: 0o755})
			}
		}
		if strings.HasSuffix(f.name, "/") {
			if dirs[f.name] {
				// Declared after a file inside it created it: the declaration's mode wins.
				for i := range entries {
					if entries[i].name == f.name {
						entries[i] = f
					}
				}
				continue
			}
			dirs[f.name] = true
		}
		entries = append(entries, f)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: created, Uid: e.uid, Gid: e.uid, Format: tar.FormatPAX}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Stamp is what a build records of its commit.
type Stamp struct {
	Version, Commit string
	Created         time.Time
}

// FromGit reads the stamp of the checkout's HEAD: its commit, the commit's time, and as
// version the v* tag that points at it, or a pseudo-version of the commit (v0.0.0-<time>-<12
// digits>) as Go modules name untagged commits. A checkout with uncommitted changes gets
// "-dirty" on both: such a build is not reproducible from the commit alone.
func FromGit(ctx context.Context, dir string) (Stamp, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	commit, err := git("rev-parse", "HEAD")
	if err != nil {
		return Stamp{}, err
	}
	secs, err := git("show", "-s", "--format=%ct", "HEAD")
	if err != nil {
		return Stamp{}, err
	}
	var unix int64
	if _, err := fmt.Sscan(secs, &unix); err != nil {
		return Stamp{}, fmt.Errorf("commit time %q: %w", secs, err)
	}
	created := time.Unix(unix, 0).UTC()
	version, err := git("describe", "--tags", "--exact-match", "--match", "v*", "HEAD")
	if err != nil {
		version = "v0.0.0-" + created.Format("20060102150405") + "-" + commit[:12]
	}
	if status, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && status != "" {
		version, commit = version+"-dirty", commit+"-dirty"
	}
	return Stamp{Version: version, Commit: commit, Created: created}, nil
}

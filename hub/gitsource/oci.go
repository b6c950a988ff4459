package gitsource

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCI artifact sources: a repository whose URL is oci://registry/path is an OCI artifact
// holding a fleet repository as one gzipped tar layer (what `flotilla push artifact`, `flux
// push artifact` and ORAS push). It is followed by tag, newest tag in a semver range, or pinned
// by digest; its "commit" is the manifest's digest (64 hex digits). Its checkout is written
// with the same admission as a git tree's (plain relative names, no entry beneath a link or a
// file, no hard link or device, the size limit), and everything after it is the git path's.

// OCIScheme begins the URL of an OCI artifact source.
const OCIScheme = "oci://"

// IsOCI reports whether a repository URL names an OCI artifact.
func IsOCI(url string) bool { return strings.HasPrefix(url, OCIScheme) }

// Media types of the content layer: Flotilla's, Flux's and the generic OCI layer (ORAS).
const (
	ContentMediaType      types.MediaType = "application/vnd.flotilla.content.v1.tar+gzip"
	ArtifactType          string          = "application/vnd.flotilla.artifact.v1"
	fluxContentMediaType  types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
	genericLayerMediaType types.MediaType = types.OCILayer
)

var (
	ociDigest = regexp.MustCompile(`^sha256:([0-9a-f]{64})$`)
	ociHex    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ociRepository parses an oci:// URL into its repository.
func ociRepository(url string) (name.Repository, error) {
	repo, err := name.NewRepository(strings.TrimPrefix(url, OCIScheme), name.StrictValidation)
	if err != nil {
		return name.Repository{}, fmt.Errorf("%s is not an OCI repository: %w", url, err)
	}
	return repo, nil
}

// ociOptions are how the registry is reached: the repository's credentials (sent only to its
// registry), its CA bundle, and, as for git, connections that give up after the stall timeout
// of silence (ctx is one of Client.remote's).
func (c *Client) ociOptions(ctx context.Context, repo Repo) ([]remote.Option, error) {
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = dialStallBound
	opts := []remote.Option{remote.WithContext(ctx)}
	if a := repo.Auth; a != nil {
		if a.Username != "" || a.Password != "" {
			opts = append(opts, remote.WithAuth(authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password})))
		}
		if len(a.CABundle) > 0 || a.InsecureSkipTLSVerify {
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if len(a.CABundle) > 0 && !pool.AppendCertsFromPEM(a.CABundle) {
				return nil, errors.New("the CA bundle holds no PEM certificate")
			}
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, InsecureSkipVerify: a.InsecureSkipTLSVerify}
		}
	}
	return append(opts, remote.WithTransport(tr)), nil
}

// resolveOCI finds the artifact the repository wants: the digest pinned by revision, the
// tag revision names, the newest tag in the semver range, or latest.
func (c *Client) resolveOCI(ctx context.Context, repo Repo) (Ref, error) {
	r, err := ociRepository(repo.URL)
	if err != nil {
		return Ref{}, err
	}
	if m := ociDigest.FindStringSubmatch(repo.Revision); m != nil {
		return Ref{Name: repo.Revision, Commit: m[1]}, nil // pinned: nothing to ask
	}
	if repo.Branch != "" {
		return Ref{}, fmt.Errorf("an OCI artifact has tags, not branch %q: set revision (a tag or sha256: digest) or semver: %w", repo.Branch, ErrRefNotFound)
	}
	ctx, cancel := c.remote(ctx)
	defer cancel()
	opts, err := c.ociOptions(ctx, repo)
	if err != nil {
		return Ref{}, err
	}
	tag := "latest"
	switch {
	case repo.Semver != "":
		tags, err := remote.List(r, opts...)
		if err != nil {
			return Ref{}, fmt.Errorf("failed to list the tags of %s: %w", SanitizeURL(repo.URL), err)
		}
		byName := map[string]string{}
		for _, t := range tags {
			byName["refs/tags/"+t] = ""
		}
		newest, err := tagsSatisfying(byName, func(name string) (Ref, bool) { return Ref{Name: name}, true }, repo.Semver)
		if err != nil {
			return Ref{}, err
		}
		tag = strings.TrimPrefix(newest[0].Name, "refs/tags/")
	case repo.Revision != "":
		tag = repo.Revision
	}
	desc, err := remote.Head(r.Tag(tag), opts...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return Ref{}, fmt.Errorf("tag %q of %s: %w", tag, SanitizeURL(repo.URL), ErrRefNotFound)
		}
		return Ref{}, fmt.Errorf("failed to resolve tag %q of %s: %w", tag, SanitizeURL(repo.URL), err)
	}
	return Ref{Name: "refs/tags/" + tag, Commit: desc.Digest.Hex}, nil
}

// checkoutOCI writes the artifact of digest (64 hex digits) into checkouts/<digest>. The layer's
// bytes are checked against their digest as they are read (go-containerregistry verifies each
// blob), so what is written is what the manifest names.
func (c *Client) checkoutOCI(ctx context.Context, repo Repo, digest string) (string, error) {
	r, err := ociRepository(repo.URL)
	if err != nil {
		return "", err
	}
	dir := c.repoDir(repo)
	c.sweep(time.Now(), dir)
	defer c.lock(dir)()
	if err := c.refusal(repo, digest); err != nil {
		return "", err
	}
	out, err := c.checkoutArtifact(ctx, r, dir, repo, digest)
	return out, c.remember(repo, digest, err)
}

// checkoutArtifact is checkoutOCI of an artifact, the cache's lock held.
func (c *Client) checkoutArtifact(ctx context.Context, r name.Repository, dir string, repo Repo, digest string) (string, error) {
	checkouts := filepath.Join(dir, "checkouts")
	out := filepath.Join(checkouts, digest)
	if _, err := os.Lstat(out); err == nil {
		// Written again rather than trusted: a checkout is only ever the artifact's content.
		if err := removeCheckout(out); err != nil {
			return "", fmt.Errorf("failed to replace the checkout of %s: %w", shortCommit(digest), err)
		}
	}
	ctx, cancel := c.remote(ctx)
	defer cancel()
	opts, err := c.ociOptions(ctx, repo)
	if err != nil {
		return "", err
	}
	if v := repo.Verify; v != nil {
		// Before anything of the artifact is read: an unsigned one is never checked out.
		if err := verifyCosign(r, digest, v.Keys, opts); err != nil {
			return "", err
		}
	}
	img, err := remote.Image(r.Digest("sha256:"+digest), opts...)
	if err != nil {
		return "", fmt.Errorf("failed to fetch artifact sha256:%s of %s: %w", shortCommit(digest), SanitizeURL(repo.URL), err)
	}
	layer, err := contentLayer(img)
	if err != nil {
		return "", fmt.Errorf("artifact sha256:%s of %s: %w", shortCommit(digest), SanitizeURL(repo.URL), err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		return "", fmt.Errorf("failed to fetch the content of artifact sha256:%s: %w", shortCommit(digest), err)
	}
	defer rc.Close()
	if err := os.MkdirAll(checkouts, 0o755); err != nil {
		return "", fmt.Errorf("failed to create checkout dir: %w", err)
	}
	stage, err := os.MkdirTemp(checkouts, ".stage-")
	if err != nil {
		return "", fmt.Errorf("failed to create checkout dir: %w", err)
	}
	defer os.RemoveAll(stage)
	entries, err := tarEntries(rc, c.limits(), stage)
	if err != nil {
		return "", fmt.Errorf("artifact sha256:%s of %s: %w", shortCommit(digest), SanitizeURL(repo.URL), err)
	}
	if err := writeTree(entries, checkouts, digest, c.limits()); err != nil {
		return "", err
	}
	c.evict(checkouts)
	return out, nil
}

// contentLayer is the artifact's one content layer, of a media type known to hold a gzipped
// tar.
func contentLayer(img v1.Image) (v1.Layer, error) {
	manifest, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	var found []v1.Descriptor
	for _, l := range manifest.Layers {
		switch l.MediaType {
		case ContentMediaType, fluxContentMediaType, genericLayerMediaType:
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%w: want one content layer (%s, %s or %s), found %d of %d layers", ErrTreeRefused, ContentMediaType, fluxContentMediaType, genericLayerMediaType, len(found), len(manifest.Layers))
	}
	return img.LayerByDigest(found[0].Digest)
}

// tarEntries reads a gzipped tar into checkout entries, admitting what a git tree may hold:
// regular files (executable or not), symbolic links and directories at plain relative paths,
// each once, none beneath a link or a file; within limits, counted as the archive is read (an
// archive that inflates past them is refused there, the rest of it unread). Files' bytes are
// written into stage as they are read, never held in memory.
func tarEntries(r io.Reader, limits checkoutLimits, stage string) ([]treeEntry, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: the content layer is not gzip: %v", ErrTreeRefused, err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	var entries []treeEntry
	links, seen := map[string]bool{}, map[string]bool{}
	var files int
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: the content layer is not a tar archive: %v", ErrTreeRefused, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag == tar.TypeDir {
			if name = strings.TrimSuffix(name, "/"); name == "" || name == "." {
				continue
			}
			if err := checkEntryName(name); err != nil {
				return nil, err
			}
			continue // directories are made for the files beneath them
		}
		if err := checkEntryName(name); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: %q is in the archive twice", ErrTreeRefused, name)
		}
		seen[name] = true
		e := treeEntry{name: name, mode: filemode.Regular}
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Mode&0o111 != 0 {
				e.mode = filemode.Executable
			}
			if err := limits.count(&files, &total, h.Size); err != nil {
				return nil, err
			}
			e.staged = filepath.Join(stage, strconv.Itoa(files))
			if e.size, err = stageFile(e.staged, tr, h.Size); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrTreeRefused, name, err)
			}
		case tar.TypeSymlink:
			if err := limits.count(&files, &total, int64(len(h.Linkname))); err != nil {
				return nil, err
			}
			e.mode, e.data, e.size = filemode.Symlink, []byte(h.Linkname), int64(len(h.Linkname))
			links[name] = true
		default:
			return nil, fmt.Errorf("%w: %q is a %s, which a checkout may not hold", ErrTreeRefused, name, tarKind(h.Typeflag))
		}
		entries = append(entries, e)
	}
	if err := checkNesting(entries, links, seen); err != nil {
		return nil, err
	}
	return entries, nil
}

// stageFile writes the next size bytes of r to path.
func stageFile(path string, r io.Reader, size int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func tarKind(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "named pipe"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}

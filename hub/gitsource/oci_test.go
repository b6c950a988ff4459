package gitsource

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/flotilla-dev/flotilla/e2e/bombs"
	"github.com/flotilla-dev/flotilla/e2e/reftools"
	"github.com/flotilla-dev/flotilla/e2e/testpki"
)

// newRegistry serves an OCI registry on loopback until the test ends.
func newRegistry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushDir builds an artifact of files and pushes it as repo:tag; it returns its digest (hex).
func pushDir(t *testing.T, repo, tag string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img, err := BuildArtifact(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return push(t, repo, tag, img)
}

func push(t testing.TB, repo, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.Hex
}

// An artifact source is followed by tag, by the newest tag in a semver range, or pinned by
// digest; its checkout holds exactly the artifact's files, and the same directory pushed twice
// is the same digest.
func TestOCIArtifactsByTagSemverAndDigest(t *testing.T) {
	host := newRegistry(t)
	repoName := host + "/fleet/shop"
	c := newClient(t)
	ctx := context.Background()
	v100 := pushDir(t, repoName, "1.0.0", map[string]string{"web/cm.yaml": "v: 1\n", "web/fleet.yaml": "defaultNamespace: web\n"})
	if again := pushDir(t, repoName, "1.0.0-again", map[string]string{"web/cm.yaml": "v: 1\n", "web/fleet.yaml": "defaultNamespace: web\n"}); again != v100 {
		t.Errorf("the same directory pushed twice: %s and %s", v100, again)
	}
	v101 := pushDir(t, repoName, "1.0.1", map[string]string{"web/cm.yaml": "v: 2\n", "web/fleet.yaml": "defaultNamespace: web\n"})
	pushDir(t, repoName, "2.0.0", map[string]string{"web/cm.yaml": "v: 3\n"})

	for _, tc := range []struct {
		name string
		repo Repo
		want string
	}{
		{"semver", Repo{URL: OCIScheme + repoName, Semver: "~1.0"}, v101},
		{"tag", Repo{URL: OCIScheme + repoName, Revision: "1.0.0"}, v100},
		{"digest", Repo{URL: OCIScheme + repoName, Revision: "sha256:" + v100}, v100},
	} {
		ref, err := c.Resolve(ctx, tc.repo)
		if err != nil || ref.Commit != tc.want {
			t.Errorf("%s: %+v, %v; want %s", tc.name, ref, err, tc.want[:12])
			continue
		}
		dir, err := c.Checkout(ctx, tc.repo, ref.Commit)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "web/cm.yaml"))
		if want := map[string]string{v100: "v: 1\n", v101: "v: 2\n"}[tc.want]; err != nil || string(data) != want {
			t.Errorf("%s: web/cm.yaml %q, %v; want %q", tc.name, data, err, want)
		}
	}
	for _, tc := range []struct {
		repo Repo
		want error
	}{
		{Repo{URL: OCIScheme + repoName, Revision: "9.9.9"}, ErrRefNotFound},
		{Repo{URL: OCIScheme + repoName, Semver: ">=3"}, ErrRefNotFound},
		{Repo{URL: OCIScheme + repoName, Branch: "main"}, ErrRefNotFound},
	} {
		if _, err := c.Resolve(ctx, tc.repo); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.repo, err, tc.want)
		}
	}
	// A digest pinned is not asked of the registry until it is checked out; one it does not
	// hold fails then.
	missing := strings.Repeat("ab", 32)
	if _, err := c.Checkout(ctx, Repo{URL: OCIScheme + repoName, Revision: "sha256:" + missing}, missing); err == nil {
		t.Error("a digest the registry does not hold was checked out")
	}
}

// An artifact is a repository's author's: its archive is admitted as a git tree is. Names that
// leave the checkout, entries beneath a link, hard links, devices, an entry twice, a layer that
// is no tar, and an artifact with two content layers are refused, and nothing is written
// outside the cache.
func TestHostileArtifactsAreRefused(t *testing.T) {
	host := newRegistry(t)
	repoName := host + "/fleet/hostile"
	c := newClient(t)
	ctx := context.Background()
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{"dot-dot", []tar.Header{{Name: "../../escape.yaml", Typeflag: tar.TypeReg}}, "is not a path inside the repository"},
		{"absolute", []tar.Header{{Name: filepath.Join(outside, "abs.yaml"), Typeflag: tar.TypeReg}}, "is not a path inside the repository"},
		{"beneath a link", []tar.Header{{Name: "web", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "web/planted.yaml", Typeflag: tar.TypeReg}}, "beneath the symbolic link"},
		{"hard link", []tar.Header{{Name: "passwd", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, "hard link"},
		{"device", []tar.Header{{Name: "null", Typeflag: tar.TypeChar}}, "device"},
		{"twice", []tar.Header{{Name: "a.yaml", Typeflag: tar.TypeReg}, {Name: "a.yaml", Typeflag: tar.TypeReg}}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			gz := gzip.NewWriter(&buf)
			tw := tar.NewWriter(gz)
			for _, h := range tc.entries {
				h.Mode = 0o644
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			_ = tw.Close()
			_ = gz.Close()
			img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(buf.Bytes(), ContentMediaType)})
			if err != nil {
				t.Fatal(err)
			}
			digest := push(t, repoName, strings.ReplaceAll(tc.name, " ", "-"), img)
			_, err = c.Checkout(ctx, Repo{URL: OCIScheme + repoName}, digest)
			if !errors.Is(err, ErrTreeRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want refused: %s", err, tc.want)
			}
			if entries, _ := os.ReadDir(outside); len(entries) > 0 {
				t.Errorf("written outside the cache: %v", entries)
			}
		})
	}
	two, _ := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer([]byte("a"), ContentMediaType)}, mutate.Addendum{Layer: static.NewLayer([]byte("b"), ContentMediaType)})
	notTar, _ := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer([]byte("plain text"), types.OCILayer)})
	for name, img := range map[string]v1.Image{"two layers": two, "not gzip": notTar} {
		digest := push(t, repoName, strings.ReplaceAll(name, " ", "-"), img)
		if _, err := c.Checkout(ctx, Repo{URL: OCIScheme + repoName}, digest); !errors.Is(err, ErrTreeRefused) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}

// FuzzHostileArtifacts writes archives of any bytes as an artifact's checkout would: whatever
// names, links, types and sizes the tar headers claim, nothing is written outside the checkout,
// and an archive that is admitted is exactly what is on disk.
func FuzzHostileArtifacts(f *testing.F) {
	seed := func(headers ...tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range headers {
			h.Mode = 0o644
			_ = tw.WriteHeader(&h)
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	f.Add(seed(tar.Header{Name: "escape", Typeflag: tar.TypeSymlink, Linkname: "OUTSIDE"}, tar.Header{Name: "escape/planted.yaml", Typeflag: tar.TypeReg}))
	f.Add(seed(tar.Header{Name: "../x", Typeflag: tar.TypeReg}))
	f.Add(seed(tar.Header{Name: "app/fleet.yaml", Typeflag: tar.TypeReg}, tar.Header{Name: "app/link", Typeflag: tar.TypeSymlink, Linkname: "../../.."}))
	f.Add(seed(tar.Header{Name: "dir/", Typeflag: tar.TypeDir}, tar.Header{Name: "dir/a", Typeflag: tar.TypeLink, Linkname: "OUTSIDE/secret"}))
	f.Fuzz(func(t *testing.T, archive []byte) {
		outside := t.TempDir()
		var gzipped bytes.Buffer
		gz := gzip.NewWriter(&gzipped)
		_, _ = gz.Write(bytes.ReplaceAll(archive, []byte("OUTSIDE"), []byte(outside)))
		_ = gz.Close()
		cl := &Client{CacheDir: t.TempDir()}
		checkouts := filepath.Join(cl.CacheDir, "repos", "fuzz", "checkouts")
		limits := checkoutLimits{bytes: 1 << 20, files: 1000}
		entries, err := tarEntries(&gzipped, limits, t.TempDir())
		if err == nil {
			err = writeTree(entries, checkouts, "digest", limits)
		}
		assertNothingOutside(t, cl, outside)
		if err == nil {
			if verr := verifyCheckout(filepath.Join(checkouts, "digest"), entries); verr != nil {
				t.Errorf("the checkout is not the archive: %v", verr)
			}
		}
	})
}

// Artifacts signed with cosign (the real command, offline): one signed by an allowed key is
// checked out; an unsigned one, one signed by another key, and one whose signature was copied
// from another artifact are refused before anything of them is written; adding the other key
// lets its artifact through.
func TestOnlyArtifactsSignedByAnAllowedCosignKeyAreCheckedOut(t *testing.T) {
	host := newRegistry(t)
	repoName := host + "/fleet/signed"
	c := newClient(t)
	ctx := context.Background()
	key, other := reftools.NewCosignKey(t), reftools.NewCosignKey(t)
	ring, err := ParseKeys(map[string][]byte{"release.pub": key.Public})
	if err != nil {
		t.Fatal(err)
	}
	repo := Repo{URL: OCIScheme + repoName, Verify: &Verification{Commit: true, Keys: ring}}
	artifact := func(tag string, signer *reftools.CosignKey) string {
		d := pushDir(t, repoName, tag, map[string]string{"web/cm.yaml": "v: " + tag + "\n"})
		if signer != nil {
			reftools.CosignSign(t, *signer, repoName+"@sha256:"+d)
		}
		return d
	}
	signed := artifact("1.0.0", &key)
	if dir, err := c.Checkout(ctx, repo, signed); err != nil || dir == "" {
		t.Fatalf("the signed artifact: %v", err)
	}
	copied := artifact("1.0.3", nil)
	sig, err := remote.Image(mustTag(t, repoName+":sha256-"+signed+".sig"))
	if err != nil {
		t.Fatal(err)
	}
	push(t, repoName, "sha256-"+copied+".sig", sig)
	for _, tc := range []struct {
		name, digest, reason string
	}{
		{"unsigned", artifact("1.0.1", nil), "it has no cosign signature"},
		{"another key", artifact("1.0.2", &other), "none of its 1 cosign signatures verifies"},
		{"a signature copied from another artifact", copied, "none of its 1 cosign signatures verifies under an allowed key for this digest"},
	} {
		_, err := c.Checkout(ctx, repo, tc.digest)
		var ve *VerificationError
		if !errors.As(err, &ve) || !strings.Contains(ve.Reason, tc.reason) || !strings.Contains(err.Error(), "release.pub: key SHA256:") {
			t.Errorf("%s: %v, want refused: %s", tc.name, err, tc.reason)
		}
		if checkedOut(t, c, tc.digest) {
			t.Errorf("%s: written to the cache", tc.name)
		}
	}
	repo.Verify.Keys, err = ParseKeys(map[string][]byte{"release.pub": key.Public, "other.pub": other.Public})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkout(ctx, repo, artifact("1.0.4", &other)); err != nil {
		t.Errorf("after the other key was added: %v", err)
	}
}

func mustTag(t *testing.T, ref string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// A registry served over TLS by a CA of its own, behind a login: an artifact source reaches it
// only with the CA of its caBundle and its credentials; the system roots, another CA, or no
// credentials get nothing.
func TestOCIArtifactsThroughTheirOwnCAAndLogin(t *testing.T) {
	ca, other := testpki.NewCA(t, "registry-ca"), testpki.NewCA(t, "other-ca")
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "fleet" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, "login", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1")}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")

	img, err := BuildArtifact(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	ref, _ := name.NewTag(host + "/fleet/tls:1.0.0")
	if err := remote.Write(ref, img, remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: "fleet", Password: "s3cret"})); err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	c := newClient(t)
	for _, tc := range []struct {
		name string
		auth *Auth
		ok   bool
	}{
		{"its CA and login", &Auth{CABundle: ca.PEM(), Username: "fleet", Password: "s3cret"}, true},
		{"system roots", &Auth{Username: "fleet", Password: "s3cret"}, false},
		{"another CA", &Auth{CABundle: other.PEM(), Username: "fleet", Password: "s3cret"}, false},
		{"no login", &Auth{CABundle: ca.PEM()}, false},
	} {
		repo := Repo{URL: OCIScheme + host + "/fleet/tls", Revision: "1.0.0", Auth: tc.auth}
		got, err := c.Resolve(context.Background(), repo)
		if tc.ok && (err != nil || got.Commit != want.Hex) {
			t.Errorf("%s: %+v, %v", tc.name, got, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("%s: resolved %+v", tc.name, got)
		}
		if tc.ok {
			if _, err := c.Checkout(context.Background(), repo, got.Commit); err != nil {
				t.Errorf("%s: checkout: %v", tc.name, err)
			}
		}
	}
}

// An artifact is bounded as it is read, not after: one of a 64 MiB file of zeros (64 KiB
// gzipped) is refused at the byte limit, one of 60,000 empty files (a few hundred KiB) at the
// file limit; each with the limit named, nothing checked out and nothing staged left behind.
// What it costs in memory is BenchmarkArtifactBombs's figure.
func TestArtifactBombsAreRefusedAsTheyAreRead(t *testing.T) {
	host := newRegistry(t)
	repoName := host + "/fleet/bombs"
	c := &Client{CacheDir: t.TempDir(), MaxCheckoutBytes: 8 << 20, MaxCheckoutFiles: 50_000}
	for _, tc := range []struct {
		name  string
		bomb  []byte
		want  error
		names string
	}{
		{"zeros", bombLayer(t, 1, 64<<20), ErrCheckoutTooLarge, "--checkout-max-bytes"},
		{"entries", bombLayer(t, 60_000, 0), ErrCheckoutTooManyFiles, "--checkout-max-files"},
	} {
		img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(tc.bomb, ContentMediaType)})
		if err != nil {
			t.Fatal(err)
		}
		digest := push(t, repoName, tc.name, img)
		repo := Repo{URL: OCIScheme + repoName}
		if _, err := c.Checkout(context.Background(), repo, digest); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s (%d KiB gzipped): %v, want %v naming %s", tc.name, len(tc.bomb)>>10, err, tc.want, tc.names)
		}
		if left, _ := os.ReadDir(filepath.Join(c.repoDir(repo), "checkouts")); len(left) != 0 {
			t.Errorf("%s: left in the cache: %v", tc.name, left)
		}
		// Remembered: the same artifact is not fetched again under the same limits.
		if _, err := c.Checkout(context.Background(), repo, digest); !errors.Is(err, ErrCommitRefused) || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s again: %v, want ErrCommitRefused naming %s", tc.name, err, tc.names)
		}
		// Under other limits it is fetched, and judged, again.
		raised := &Client{CacheDir: c.CacheDir, MaxCheckoutBytes: c.MaxCheckoutBytes + 1, MaxCheckoutFiles: c.MaxCheckoutFiles}
		if _, err := raised.Checkout(context.Background(), repo, digest); errors.Is(err, ErrCommitRefused) || !errors.Is(err, tc.want) {
			t.Errorf("%s under other limits: %v, want %v from a new fetch", tc.name, err, tc.want)
		}
	}
}

// bombLayer is bombs.Layer, failing t on an error.
func bombLayer(t testing.TB, files int, size int64) []byte {
	t.Helper()
	layer, err := bombs.Layer(files, size)
	if err != nil {
		t.Fatal(err)
	}
	return layer
}

// BenchmarkArtifactBombs reports what checking out an artifact of one 1 GiB file of zeros
// (about 1 MiB gzipped) costs the hub in memory with the default limits: bytes allocated and
// the heap's peak above where it started (e2e/scale/README.md keeps the figures).
func BenchmarkArtifactBombs(b *testing.B) {
	host := newRegistry(b)
	bomb := bombLayer(b, 1, 1<<30)
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(bomb, ContentMediaType)})
	if err != nil {
		b.Fatal(err)
	}
	digest := push(b, host+"/fleet/bomb", "gib", img)
	b.ReportAllocs()
	var peak uint64
	for b.Loop() {
		c := &Client{CacheDir: b.TempDir()}
		var err error
		heapPeak(&peak, func() { _, err = c.Checkout(context.Background(), Repo{URL: OCIScheme + host + "/fleet/bomb"}, digest) })
		if !errors.Is(err, ErrCheckoutTooLarge) {
			b.Fatalf("the 1 GiB artifact: %v, want ErrCheckoutTooLarge", err)
		}
	}
	b.ReportMetric(float64(len(bomb))/(1<<20), "MiB-gzipped")
	b.ReportMetric(float64(peak)/(1<<20), "MiB-heap-peak-above-start")
}

// heapPeak runs f and raises peak to the largest heap in use above where it started while f ran.
func heapPeak(peak *uint64, f func()) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := sampleHeap(peak, before.HeapInuse)
	f()
	stop()
}

// sampleHeap records in peak the largest heap in use above base until stop is called.
func sampleHeap(peak *uint64, base uint64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base && m.HeapInuse-base > *peak {
				*peak = m.HeapInuse - base
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

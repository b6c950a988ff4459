package gitsource

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Cosign signatures of OCI artifacts, by key and offline: cosign stores an artifact's
// signatures as the image tagged sha256-<digest>.sig in the artifact's repository, one layer per
// signature, each a simple-signing payload (which names the digest signed) with the signature in
// an annotation. An artifact passes when one of those payloads names its digest and verifies
// under a key of the GitRepo. Transparency-log entries and certificates (keyless signing) are
// not consulted: a signature needs a key the operator gave.

const (
	cosignPayloadType     = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignatureAnnot  = "dev.cosignproject.cosign/signature"
	cosignSignatureType   = "cosign container image signature"
	maxCosignPayloadBytes = 64 << 10
	maxCosignSignatures   = 64
)

// cosignPayload is the part of a simple-signing payload that is checked.
type cosignPayload struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// verifyCosign checks that the artifact of digest (hex) in r is signed by a key of the ring.
func verifyCosign(r name.Repository, digest string, keys *KeyRing, opts []remote.Option) error {
	refuse := func(reason string) error {
		return &VerificationError{Object: "artifact sha256:" + shortCommit(digest), Reason: reason, Allowed: keys.Names()}
	}
	if len(keys.pem) == 0 {
		return refuse("no PEM public key (cosign.pub) is allowed, and artifacts are signed with cosign keys")
	}
	sigs, err := remote.Image(r.Tag("sha256-"+digest+".sig"), opts...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return refuse("it has no cosign signature (no sha256-<digest>.sig in its repository)")
		}
		return fmt.Errorf("failed to read the signatures of artifact sha256:%s: %w", shortCommit(digest), err)
	}
	manifest, err := sigs.Manifest()
	if err != nil {
		return fmt.Errorf("failed to read the signatures of artifact sha256:%s: %w", shortCommit(digest), err)
	}
	checked := 0
	for _, l := range manifest.Layers {
		if l.MediaType != cosignPayloadType || checked == maxCosignSignatures {
			continue
		}
		checked++
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[cosignSignatureAnnot])
		if err != nil || len(sig) == 0 || l.Size > maxCosignPayloadBytes {
			continue
		}
		layer, err := sigs.LayerByDigest(l.Digest)
		if err != nil {
			continue
		}
		rc, err := layer.Compressed() // stored as it is; its digest is checked as it is read
		if err != nil {
			continue
		}
		payload, err := io.ReadAll(io.LimitReader(rc, maxCosignPayloadBytes))
		rc.Close()
		if err != nil || !keys.verifyBlob(payload, sig) {
			continue
		}
		var p cosignPayload
		if json.Unmarshal(payload, &p) != nil || p.Critical.Type != cosignSignatureType || p.Critical.Image.DockerManifestDigest != "sha256:"+digest {
			continue // a valid signature of something else
		}
		return nil
	}
	return refuse(fmt.Sprintf("none of its %d cosign signatures verifies under an allowed key for this digest", checked))
}

// VerifySignature checks that the OCI artifact of digest (64 hex digits) in repo's registry
// repository (an oci:// URL) is signed with cosign by a key of repo.Verify, reaching the
// registry with repo's credentials and CA. Without repo.Verify nothing is checked. A HelmOp
// verifies an OCI chart with it before rendering the chart pinned to that digest.
func (c *Client) VerifySignature(ctx context.Context, repo Repo, digest string) error {
	if repo.Verify == nil {
		return nil
	}
	r, err := ociRepository(repo.URL)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	opts, err := c.ociOptions(ctx, repo)
	if err != nil {
		return err
	}
	return verifyCosign(r, digest, repo.Verify.Keys, opts)
}

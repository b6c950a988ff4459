package sources

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/bundle"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
)

// Keys of a GitRepo's namespace: the public keys its commits must be signed with, and the
// private keys its SOPS files are decrypted with.

// Signed sources: a GitRepo with spec.verify deploys only what its keys signed. The keys are
// read from its own namespace when a commit is about to be checked out (not at every poll), so
// a key added or removed counts from the next commit checked out on.

// Checkout writes a commit of the GitRepo for rendering, verified first as spec.verify asks:
// the commit's signature inside the checkout (nothing of an unverified commit is written), and,
// when ref names a tag (a sync of a tag-following GitRepo), the tag's.
func (r *SourceReconciler) Checkout(ctx context.Context, repo *v1alpha1.GitRepo, src gitsource.Repo, ref gitsource.Ref) (string, error) {
	v, err := verificationOf(ctx, r.Client, repo)
	if err != nil {
		return "", err
	}
	src.Verify = v
	if ref.Name != "" {
		if err := r.Git.VerifyTag(ctx, src, ref); err != nil {
			return "", err
		}
	}
	return r.Git.Checkout(ctx, src, ref.Commit)
}

// verificationOf reads the keys a GitRepo's spec.verify names; nil when it verifies nothing.
func verificationOf(ctx context.Context, c client.Reader, repo *v1alpha1.GitRepo) (*gitsource.Verification, error) {
	v := repo.Spec.Verify
	if v == nil {
		return nil, nil
	}
	key := types.NamespacedName{Namespace: repo.Namespace}
	var data map[string][]byte
	var what string
	switch {
	case v.SecretRef != nil:
		var s corev1.Secret
		key.Name, what = v.SecretRef.Name, "spec.verify.secretRef: secret "+v.SecretRef.Name
		if err := c.Get(ctx, key, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		data = s.Data
	case v.ConfigMapRef != nil:
		var cm corev1.ConfigMap
		key.Name, what = v.ConfigMapRef.Name, "spec.verify.configMapRef: configmap "+v.ConfigMapRef.Name
		if err := c.Get(ctx, key, &cm); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		data = make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
		for k, val := range cm.Data {
			data[k] = []byte(val)
		}
		for k, val := range cm.BinaryData {
			data[k] = val
		}
	default:
		// The API server refuses this; a GitRepo that got through anyway verifies against no key.
		return nil, &gitsource.VerificationError{Object: "the GitRepo", Reason: "spec.verify names no keys", Allowed: nil}
	}
	ring, err := gitsource.ParseKeys(data)
	if err != nil {
		return nil, &gitsource.VerificationError{Object: "the GitRepo", Reason: fmt.Sprintf("%s: %v", what, err)}
	}
	return &gitsource.Verification{Commit: v.Mode.VerifiesCommits(), Tag: v.Mode.VerifiesTags(), Keys: ring}, nil
}

// decryptorOf reads the private keys a GitRepo's spec.decryption names, from its own
// namespace, each time a commit is rendered (a rotated key counts from the next render); nil
// when it decrypts nothing.
func decryptorOf(ctx context.Context, c client.Reader, repo *v1alpha1.GitRepo) (*bundle.Decryptor, error) {
	d := repo.Spec.Decryption
	if d == nil {
		return nil, nil
	}
	var s corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: d.SecretRef.Name}, &s); err != nil {
		return nil, fmt.Errorf("spec.decryption.secretRef: secret %s: %w", d.SecretRef.Name, err)
	}
	return bundle.NewDecryptor("secret "+d.SecretRef.Name, s.Data)
}

package gitsource

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// Signed sources: a GitRepo may deploy only commits, or annotated tags, signed by keys its
// operator named. Verification fails closed: anything not positively verified (no signature,
// a format not known, a key not named, a signature that does not check, a key list that holds
// no key) is refused, and nothing of the commit is checked out or rendered.

// ErrUnverified: a commit or tag is not signed by a key its GitRepo allows.
var ErrUnverified = errors.New("not signed by an allowed key")

// Verification is what a repository's commits or tags must be signed with.
type Verification struct {
	// Commit: the commit deployed must be signed. Tag: the annotated tag a tag-following
	// repository resolves to must be.
	Commit, Tag bool
	Keys        *KeyRing
}

// VerificationError says which commit or tag was refused, why, and which keys were allowed.
type VerificationError struct {
	// Object is "commit 1a2b3c4d5e6f" or "tag v1.2.0".
	Object  string
	Reason  string
	Allowed []string
}

func (e *VerificationError) Error() string {
	return fmt.Sprintf("%s is %s: %s (allowed: %s)", e.Object, ErrUnverified, e.Reason, strings.Join(e.Allowed, ", "))
}

func (e *VerificationError) Unwrap() error { return ErrUnverified }

// KeyRing is the public keys a GitRepo's signatures may be made with: OpenPGP keys and SSH keys,
// each named by where it came from and its fingerprint.
type KeyRing struct {
	pgp openpgp.EntityList
	ssh []sshKey
	// pem are the keys of cosign signatures (OCI artifacts).
	pem []pemKey
	// names are the keys for people: "<source>: OpenPGP <fingerprint>", "<source>: SSH SHA256:…".
	names []string
}

type sshKey struct {
	key  ssh.PublicKey
	name string
}

// pemKey is a public key in PEM (cosign.pub): what OCI artifacts are signed with.
type pemKey struct {
	key  crypto.PublicKey
	name string
}

// ParseKeys reads the public keys of a Secret's or ConfigMap's data: each value an armored
// OpenPGP public key block (one or more keys), PEM public keys (cosign.pub: ECDSA, RSA or
// Ed25519, for OCI artifacts), or SSH public keys one per line as in authorized_keys (options
// and comments allowed, blank lines and # comments skipped). A value
// that holds neither, or data that holds no key at all, is an error: an empty key list would
// allow nothing, and saying so is clearer than refusing every commit.
func ParseKeys(data map[string][]byte) (*KeyRing, error) {
	ring := &KeyRing{}
	for _, name := range sortedKeys(data) {
		value := data[name]
		if bytes.Contains(value, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
			entities, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(value))
			if err != nil {
				return nil, fmt.Errorf("%s: not an OpenPGP public key block: %w", name, err)
			}
			for _, e := range entities {
				ring.pgp = append(ring.pgp, e)
				ring.names = append(ring.names, fmt.Sprintf("%s: OpenPGP %X", name, e.PrimaryKey.Fingerprint))
			}
			continue
		}
		if bytes.Contains(value, []byte("-----BEGIN PUBLIC KEY-----")) {
			keys, err := parsePEMKeys(value)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			for _, k := range keys {
				ring.pem = append(ring.pem, pemKey{key: k.key, name: name + ": " + k.name})
				ring.names = append(ring.names, name+": "+k.name)
			}
			continue
		}
		found := 0
		sc := bufio.NewScanner(bytes.NewReader(value))
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(text))
			if err != nil {
				return nil, fmt.Errorf("%s: line %d: not an SSH public key: %w", name, line, err)
			}
			ring.ssh = append(ring.ssh, sshKey{key: key, name: fmt.Sprintf("%s: SSH %s", name, ssh.FingerprintSHA256(key))})
			ring.names = append(ring.names, ring.ssh[len(ring.ssh)-1].name)
			found++
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: holds neither an OpenPGP public key block nor SSH public keys", name)
		}
	}
	if len(ring.names) == 0 {
		return nil, errors.New("holds no public key")
	}
	return ring, nil
}

func sortedKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Names lists the keys for messages.
func (k *KeyRing) Names() []string { return slices.Clone(k.names) }

// VerifyCommit checks that a commit is signed by a key of the ring.
func (k *KeyRing) VerifyCommit(co *object.Commit) error {
	refuse := func(reason string) error {
		return &VerificationError{Object: "commit " + co.Hash.String()[:12], Reason: reason, Allowed: k.names}
	}
	if co.PGPSignature == "" {
		return refuse("it is not signed")
	}
	var payload plumbing.MemoryObject
	if err := co.EncodeWithoutSignature(&payload); err != nil {
		return refuse(fmt.Sprintf("it cannot be read: %v", err))
	}
	if reason := k.verify(&payload, co.PGPSignature); reason != "" {
		return refuse(reason)
	}
	return nil
}

// VerifyTag checks that an annotated tag is signed by a key of the ring.
func (k *KeyRing) VerifyTag(tag *object.Tag) error {
	refuse := func(reason string) error {
		return &VerificationError{Object: "tag " + tag.Name, Reason: reason, Allowed: k.names}
	}
	if tag.PGPSignature == "" {
		return refuse("it is not signed")
	}
	var payload plumbing.MemoryObject
	if err := tag.EncodeWithoutSignature(&payload); err != nil {
		return refuse(fmt.Sprintf("it cannot be read: %v", err))
	}
	if reason := k.verify(&payload, tag.PGPSignature); reason != "" {
		return refuse(reason)
	}
	return nil
}

// verify checks a detached signature over an object's signed bytes; "" when it holds.
func (k *KeyRing) verify(payload *plumbing.MemoryObject, signature string) string {
	signed, err := readAll(payload)
	if err != nil {
		return fmt.Sprintf("it cannot be read: %v", err)
	}
	switch {
	case strings.HasPrefix(signature, "-----BEGIN SSH SIGNATURE-----"):
		return k.verifySSH(signed, signature)
	case strings.HasPrefix(signature, "-----BEGIN PGP SIGNATURE-----"):
		if len(k.pgp) == 0 {
			return "it is signed with OpenPGP and no OpenPGP key is allowed"
		}
		_, err := openpgp.CheckArmoredDetachedSignature(k.pgp, bytes.NewReader(signed), strings.NewReader(signature), nil)
		switch {
		case errors.Is(err, pgperrors.ErrUnknownIssuer):
			return "it is signed with an OpenPGP key that is not allowed"
		case err != nil:
			return fmt.Sprintf("its OpenPGP signature does not verify: %v", err)
		}
		return ""
	}
	return "its signature is of a kind not accepted (OpenPGP and SSH signatures are)"
}

func readAll(o *plumbing.MemoryObject) ([]byte, error) {
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// sshsigMagic begins an SSH signature blob and the data it signs (OpenSSH's PROTOCOL.sshsig).
const sshsigMagic = "SSHSIG"

// sshsigNamespace is the namespace git signs commits and tags in.
const sshsigNamespace = "git"

// verifySSH checks an SSH signature (ssh-keygen -Y sign, as git makes it) over signed.
func (k *KeyRing) verifySSH(signed []byte, armored string) string {
	block, _ := pem.Decode([]byte(armored))
	if block == nil || block.Type != "SSH SIGNATURE" {
		return "its SSH signature is not armored as ssh-keygen writes it"
	}
	blob := block.Bytes
	if !bytes.HasPrefix(blob, []byte(sshsigMagic)) {
		return "its SSH signature does not begin with SSHSIG"
	}
	var sig struct {
		Version   uint32
		PublicKey []byte
		Namespace string
		Reserved  string
		Hash      string
		Signature []byte
	}
	if err := ssh.Unmarshal(blob[len(sshsigMagic):], &sig); err != nil || sig.Version != 1 {
		return "its SSH signature is not of version 1 of the format"
	}
	if sig.Namespace != sshsigNamespace {
		return fmt.Sprintf("its SSH signature is for namespace %q, not %q", sig.Namespace, sshsigNamespace)
	}
	pub, err := ssh.ParsePublicKey(sig.PublicKey)
	if err != nil {
		return "its SSH signature names a public key that does not parse"
	}
	var key *sshKey
	for i := range k.ssh {
		if bytes.Equal(k.ssh[i].key.Marshal(), pub.Marshal()) {
			key = &k.ssh[i]
			break
		}
	}
	if key == nil {
		return fmt.Sprintf("it is signed with SSH key %s, which is not allowed", ssh.FingerprintSHA256(pub))
	}
	var digest []byte
	switch sig.Hash {
	case "sha256":
		h := sha256.Sum256(signed)
		digest = h[:]
	case "sha512":
		h := sha512.Sum512(signed)
		digest = h[:]
	default:
		return fmt.Sprintf("its SSH signature uses hash %q (sha256 and sha512 are accepted)", sig.Hash)
	}
	var inner struct {
		Format string
		Blob   []byte
		Rest   []byte `ssh:"rest"`
	}
	if err := ssh.Unmarshal(sig.Signature, &inner); err != nil {
		return "its SSH signature's signature does not parse"
	}
	message := ssh.Marshal(struct {
		Namespace, Reserved, Hash string
		Digest                    []byte
	}{sig.Namespace, sig.Reserved, sig.Hash, digest})
	message = append([]byte(sshsigMagic), message...)
	if err := key.key.Verify(message, &ssh.Signature{Format: inner.Format, Blob: inner.Blob, Rest: inner.Rest}); err != nil {
		return fmt.Sprintf("its SSH signature by %s does not verify: %v", ssh.FingerprintSHA256(pub), err)
	}
	return ""
}

// parsePEMKeys reads the PUBLIC KEY blocks of a PEM value, each named by the SHA-256 of its DER.
func parsePEMKeys(data []byte) ([]pemKey, error) {
	var out []pemKey
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			continue
		}
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("not a PEM public key: %w", err)
		}
		switch key.(type) {
		case *ecdsa.PublicKey, *rsa.PublicKey, ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("a %T is not a signing key cosign uses", key)
		}
		sum := sha256.Sum256(block.Bytes)
		out = append(out, pemKey{key: key, name: "key SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])})
	}
	if len(out) == 0 {
		return nil, errors.New("holds no PEM public key")
	}
	return out, nil
}

// verifyBlob checks a signature over payload with one of the ring's PEM keys, as cosign signs:
// ECDSA (ASN.1) and RSA (PKCS #1 v1.5) over the payload's SHA-256, Ed25519 over the payload.
func (k *KeyRing) verifyBlob(payload, sig []byte) bool {
	digest := sha256.Sum256(payload)
	for _, pk := range k.pem {
		switch key := pk.key.(type) {
		case *ecdsa.PublicKey:
			if ecdsa.VerifyASN1(key, digest[:], sig) {
				return true
			}
		case *rsa.PublicKey:
			if rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig) == nil {
				return true
			}
		case ed25519.PublicKey:
			if ed25519.Verify(key, payload, sig) {
				return true
			}
		}
	}
	return false
}

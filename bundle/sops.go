package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/ProtonMail/go-crypto/openpgp"
	pgparmor "github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/logging"
	"github.com/getsops/sops/v3/pgp"
	sopsdotenv "github.com/getsops/sops/v3/stores/dotenv"
	sopsini "github.com/getsops/sops/v3/stores/ini"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"github.com/sirupsen/logrus"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
	k8syaml "sigs.k8s.io/yaml"
)

// SOPS: files of a repository encrypted with SOPS (YAML and JSON, values encrypted with
// AES-256-GCM under a data key that age or OpenPGP keys encrypt) are decrypted when they are
// read for a render, with the keys of the GitRepo's namespace (a Decryptor). The library reads
// and checks the file (its tree, its MAC); the data key is recovered here, from the given keys
// only: the key services SOPS would otherwise ask (cloud KMS, Vault, a local agent, the
// environment) are never reached. A file encrypted with SOPS is never deployed as it is: without
// keys it is an error naming the file.

func init() {
	// SOPS logs through logrus; nothing of a file being decrypted may reach a log.
	logging.SetLevel(logrus.PanicLevel)
}

// Decryptor decrypts SOPS files with a namespace's private keys. Safe for concurrent use.
type Decryptor struct {
	age    []age.Identity
	pgp    openpgp.EntityList
	source string

	// revealed are the values it decrypted: the renders it serves scrub them from their errors.
	revealed scrub.Secrets
}

// DecryptionKeyNames are how the values of a decryption Secret are named: an age identity file
// (AGE-SECRET-KEY-1… lines) or an armored OpenPGP private key block.
const (
	AgeKeySuffix = ".agekey"
	PGPKeySuffix = ".asc"
)

// NewDecryptor reads private keys: each value of data, by the suffix of its name, age identities
// (.agekey) or an armored OpenPGP private key block (.asc, without a passphrase). source says
// where they came from, for messages. A name with another suffix, a value that does not parse
// or data with no key at all is an error.
func NewDecryptor(source string, data map[string][]byte) (*Decryptor, error) {
	d := &Decryptor{source: source}
	for _, name := range sortedNames(data) {
		value := data[name]
		switch {
		case strings.HasSuffix(name, AgeKeySuffix):
			ids, err := age.ParseIdentities(bytes.NewReader(value))
			if err != nil {
				// The parser's error may quote the key: not repeated.
				return nil, fmt.Errorf("%s: %s: does not hold age identities (AGE-SECRET-KEY-1… lines)", source, name)
			}
			d.age = append(d.age, ids...)
		case strings.HasSuffix(name, PGPKeySuffix):
			ring, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(value))
			if err != nil {
				return nil, fmt.Errorf("%s: %s: does not hold an armored OpenPGP private key block", source, name)
			}
			hasPrivate := false
			for _, e := range ring {
				hasPrivate = hasPrivate || e.PrivateKey != nil
			}
			if !hasPrivate {
				return nil, fmt.Errorf("%s: %s: holds no private key", source, name)
			}
			d.pgp = append(d.pgp, ring...)
		default:
			return nil, fmt.Errorf("%s: %s: name the value <name>%s (age identities) or <name>%s (an armored OpenPGP private key)", source, name, AgeKeySuffix, PGPKeySuffix)
		}
	}
	if len(d.age) == 0 && len(d.pgp) == 0 {
		return nil, fmt.Errorf("%s: holds no decryption key", source)
	}
	return d, nil
}

func sortedNames(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ErrEncrypted: a file is encrypted with SOPS and there are no keys to decrypt it.
var ErrEncrypted = errors.New("is encrypted with SOPS, and no decryption keys are given (the GitRepo's spec.decryption)")

// sopsMarker finds the metadata SOPS adds at the top level of a YAML or JSON file, among the
// lines of a dotenv file (sops_mac=…), or as an INI file's section ([sops]).
var sopsMarker = regexp.MustCompile(`(?m)^(sops:|\s*"sops"\s*:|sops_mac=|\[sops\]\s*$)`)

// isSOPS reports whether a file is encrypted with SOPS: it has the top-level sops metadata and
// encrypted values.
func isSOPS(data []byte) bool {
	return bytes.Contains(data, []byte("ENC[AES256_GCM,")) && sopsMarker.Match(data)
}

// decrypt returns the plaintext of a SOPS file, checked against its MAC.
func (d *Decryptor) decrypt(file string, data []byte) ([]byte, error) {
	stores := config.NewStoresConfig()
	var store interface {
		LoadEncryptedFile([]byte) (sops.Tree, error)
		EmitPlainFile(sops.TreeBranches) ([]byte, error)
	}
	format := formatOf(file)
	switch format {
	case formatJSON:
		store = sopsjson.NewStore(&stores.JSON)
	case formatDotenv:
		store = sopsdotenv.NewStore(&stores.Dotenv)
	case formatINI:
		store = sopsini.NewStore(&stores.INI)
	default:
		store = sopsyaml.NewStore(&stores.YAML)
	}
	tree, err := store.LoadEncryptedFile(data)
	if err != nil {
		return nil, fmt.Errorf("not a SOPS file that can be read: %w", err)
	}
	key, err := d.dataKey(tree.Metadata)
	if err != nil {
		return nil, err
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(key, cipher)
	if err != nil {
		return nil, fmt.Errorf("its values do not decrypt: %w", err)
	}
	stored, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, key, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil || stored != mac {
		return nil, errors.New("its MAC does not match its content: the file was altered after it was encrypted")
	}
	plain, err := store.EmitPlainFile(tree.Branches)
	if err != nil {
		return nil, err
	}
	d.remember(format, data, plain)
	return plain, nil
}

// sopsFormat is how a SOPS file is laid out, by its name as sops itself decides.
type sopsFormat int

const (
	formatYAML sopsFormat = iota
	formatJSON
	formatDotenv // KEY=value lines, as Kustomize's secretGenerator envs read them
	formatINI
)

func formatOf(file string) sopsFormat {
	switch ext := strings.ToLower(path.Ext(file)); {
	case ext == ".json":
		return formatJSON
	case ext == ".env" || strings.HasPrefix(strings.ToLower(path.Base(file)), ".env"):
		return formatDotenv
	case ext == ".ini":
		return formatINI
	}
	return formatYAML
}

// remember records the values that were encrypted in a file (a leaf of the ciphertext that is
// ENC[…]) as the plaintext has them.
func (d *Decryptor) remember(format sopsFormat, cipher, plain []byte) {
	var c, p any
	switch format {
	case formatDotenv, formatINI:
		c, p = keyValues(cipher), keyValues(plain)
	default:
		if k8syaml.Unmarshal(cipher, &c) != nil || k8syaml.Unmarshal(plain, &p) != nil {
			return
		}
	}
	var walk func(c, p any)
	walk = func(c, p any) {
		switch c := c.(type) {
		case map[string]any:
			if pm, ok := p.(map[string]any); ok {
				for k, v := range c {
					walk(v, pm[k])
				}
			}
		case []any:
			if pl, ok := p.([]any); ok && len(pl) == len(c) {
				for i := range c {
					walk(c[i], pl[i])
				}
			}
		case string:
			if strings.HasPrefix(c, "ENC[AES256_GCM,") && p != nil {
				d.revealed.AddTree(p)
			}
		}
	}
	walk(c, p)
}

// Reveals reports whether text holds a value the decryptor decrypted, in any of the forms
// scrub.Forms names (as it is, base64 encoded as a Secret's data holds it, …): what must not be
// shown without being asked for.
func (d *Decryptor) Reveals(text []byte) bool {
	return d.revealed.Reveals(text)
}

// Revealed are the values it decrypted so far.
func (d *Decryptor) Revealed() *scrub.Secrets {
	if d == nil {
		return nil
	}
	return &d.revealed
}

// dataKey recovers a file's data key with one of the decryptor's keys. Only age and OpenPGP
// recipients are tried; a file whose data key is split between key groups (Shamir) is refused.
func (d *Decryptor) dataKey(m sops.Metadata) ([]byte, error) {
	if len(m.KeyGroups) != 1 {
		return nil, fmt.Errorf("its data key is split between %d key groups (Shamir), which is not supported", len(m.KeyGroups))
	}
	var recipients []string
	for _, k := range m.KeyGroups[0] {
		switch k := k.(type) {
		case *sopsage.MasterKey:
			recipients = append(recipients, "age "+k.Recipient)
			if key, err := d.ageDataKey(k.EncryptedKey); err == nil {
				return key, nil
			}
		case *pgp.MasterKey:
			recipients = append(recipients, "pgp "+k.Fingerprint)
			if key, err := d.pgpDataKey(k.EncryptedKey); err == nil {
				return key, nil
			}
		default:
			recipients = append(recipients, k.TypeToIdentifier()+" (not tried: only age and pgp keys are)")
		}
	}
	return nil, fmt.Errorf("no key of %s decrypts it (encrypted for %s)", d.source, strings.Join(recipients, ", "))
}

func (d *Decryptor) ageDataKey(enc string) ([]byte, error) {
	if len(d.age) == 0 {
		return nil, errors.New("no age identity")
	}
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(enc)), d.age...)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(r, 1024))
}

func (d *Decryptor) pgpDataKey(enc string) ([]byte, error) {
	if len(d.pgp) == 0 {
		return nil, errors.New("no OpenPGP key")
	}
	block, err := pgparmor.Decode(strings.NewReader(enc))
	if err != nil {
		return nil, err
	}
	md, err := openpgp.ReadMessage(block.Body, d.pgp, nil, nil)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(md.UnverifiedBody, 1024))
}

// keyValues reads the key=value lines of a dotenv or INI file, keyed by section and key, as a
// map remember can walk; comments and other lines are left out.
func keyValues(data []byte) any {
	out := map[string]any{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, ";") {
			out[section+"\x00"+strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

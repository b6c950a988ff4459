package bundle

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/reftools"
)

const (
	plainSecret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: s3cr3t-horse-battery\n  user: app\n"
	plainValues = "greeting: hello-from-the-vault\n"
)

// sopsRepo is a repository with a SOPS-encrypted file of each kind a bundle reads: a plain
// manifest (only its data encrypted, as usual for Secrets), a Helm values file of a chart in the
// repository, and a resource of a Kustomize base.
func sopsRepo(t *testing.T, o reftools.SOPSOptions) string {
	secret := o
	secret.EncryptedRegex = "^(data|stringData)$"
	return writeRepo(t, map[string]string{
		"plain/fleet.yaml":              "defaultNamespace: plain\n",
		"plain/secret.yaml":             string(reftools.SOPSEncrypt(t, "secret.yaml", []byte(plainSecret), secret)),
		"helm/fleet.yaml":               "defaultNamespace: helm\nhelm:\n  chart: ./chart\n  valuesFiles: [secrets.yaml]\n",
		"helm/secrets.yaml":             string(reftools.SOPSEncrypt(t, "secrets.yaml", []byte(plainValues), o)),
		"helm/chart/Chart.yaml":         "apiVersion: v2\nname: greeter\nversion: 0.1.0\n",
		"helm/chart/templates/cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeter}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
		"kz/fleet.yaml":                 "defaultNamespace: kz\nkustomize: {dir: overlay}\n",
		"kz/base/kustomization.yaml":    "resources: [secret.json]\n",
		"kz/base/secret.json":           string(reftools.SOPSEncrypt(t, "secret.json", []byte(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api"}, "stringData": {"token": "json-token-value"}}`), o)),
		"kz/overlay/kustomization.yaml": "resources: [../base]\nnamePrefix: prod-\n",
	})
}

func renderAll(t *testing.T, root string, opts RendererOptions) (map[string]string, map[string]error) {
	t.Helper()
	sources, err := Discover(root, "repo", []string{"plain", "helm", "kz"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRenderer(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, errs := map[string]string{}, map[string]error{}
	for i := range sources {
		res, err := r.Render(context.Background(), &sources[i], Target{ClusterName: "c1"})
		if err != nil {
			errs[sources[i].Dir] = err
			continue
		}
		out[sources[i].Dir] = string(res.Manifest)
	}
	return out, errs
}

// Files encrypted by the sops command, for age and for OpenPGP, render decrypted in every place
// a bundle reads a file (manifests, values files, Kustomize resources), in this process and in
// the sandbox's child, which has no keys of its own.
func TestSOPSFilesRenderDecrypted(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pgpKey := gitserver.NewOpenPGPKey(t, "ops")
	for name, tc := range map[string]struct {
		encrypt reftools.SOPSOptions
		keys    map[string][]byte
	}{
		"age":     {reftools.SOPSOptions{Age: []string{id.Recipient().String()}}, map[string][]byte{"ops.agekey": []byte("# ops\n" + id.String() + "\n")}},
		"openpgp": {reftools.SOPSOptions{PGP: []string{pgpKey.Fingerprint}, GnuPGHome: pgpKey.GnuPGHome}, map[string][]byte{"ops.asc": []byte(pgpKey.Private(t))}},
	} {
		t.Run(name, func(t *testing.T) {
			root := sopsRepo(t, tc.encrypt)
			d, err := NewDecryptor("secret keys", tc.keys)
			if err != nil {
				t.Fatal(err)
			}
			for mode, opts := range map[string]RendererOptions{"in process": {Decryption: d}, "sandbox": {Decryption: d, Sandbox: &Sandbox{}}} {
				out, errs := renderAll(t, root, opts)
				if len(errs) > 0 {
					t.Fatalf("%s: %v", mode, errs)
				}
				for dir, want := range map[string]string{"plain": "password: s3cr3t-horse-battery", "helm": "greeting: hello-from-the-vault", "kz": "token: json-token-value"} {
					if !strings.Contains(out[dir], want) || strings.Contains(out[dir], "ENC[") || strings.Contains(out[dir], "sops") {
						t.Errorf("%s, %s: want %q decrypted, and nothing of SOPS:\n%s", mode, dir, want, out[dir])
					}
				}
				if !strings.Contains(out["kz"], "name: prod-api") {
					t.Errorf("%s: the overlay did not build on the decrypted base:\n%s", mode, out["kz"])
				}
			}
		})
	}
}

// Without keys, with the wrong key, or with a file altered after it was encrypted, a bundle
// that reads a SOPS file fails naming the file, its error holds no plaintext, and the bundles
// that read none render.
func TestSOPSFilesFailClosed(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	other, _ := age.GenerateX25519Identity()
	root := sopsRepo(t, reftools.SOPSOptions{Age: []string{id.Recipient().String()}})
	wrong, err := NewDecryptor("secret keys", map[string][]byte{"other.agekey": []byte(other.String())})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		opts RendererOptions
		want map[string]string // dir → what its error says
	}{
		"no keys": {RendererOptions{}, map[string]string{"plain": "plain/secret.yaml: is encrypted with SOPS, and no decryption keys are given",
			"helm": "helm/secrets.yaml: is encrypted with SOPS", "kz": "kz/base/secret.json: is encrypted with SOPS"}},
		"another key": {RendererOptions{Decryption: wrong, Sandbox: &Sandbox{}}, map[string]string{"plain": "plain/secret.yaml: encrypted with SOPS: no key of secret keys decrypts it (encrypted for age " + id.Recipient().String(),
			"helm": "helm/secrets.yaml: encrypted with SOPS: no key", "kz": "secret.json: encrypted with SOPS: no key"}},
	} {
		out, errs := renderAll(t, root, tc.opts)
		for dir, want := range tc.want {
			if errs[dir] == nil || !strings.Contains(errs[dir].Error(), want) {
				t.Errorf("%s, %s: %v, want %q (rendered %q)", name, dir, errs[dir], want, out[dir])
			}
		}
		for dir, err := range errs {
			for _, plain := range []string{"s3cr3t", "hello-from-the-vault", "json-token-value"} {
				if strings.Contains(err.Error(), plain) {
					t.Errorf("%s, %s: the error holds plaintext: %v", name, dir, err)
				}
			}
		}
	}

	// Altered: the Secret's name (not encrypted, but under the MAC) changed.
	d, _ := NewDecryptor("secret keys", map[string][]byte{"ops.agekey": []byte(id.String())})
	altered := writeRepo(t, map[string]string{"plain/fleet.yaml": "defaultNamespace: plain\n",
		"plain/secret.yaml": strings.Replace(string(reftools.SOPSEncrypt(t, "secret.yaml", []byte(plainSecret), reftools.SOPSOptions{Age: []string{id.Recipient().String()}, EncryptedRegex: "^(data|stringData)$"})), "name: db", "name: admin", 1)})
	sources, _ := Discover(altered, "repo", []string{"plain"})
	r, _ := NewRenderer(altered, RendererOptions{Decryption: d})
	defer r.Close()
	if _, err := r.Render(context.Background(), &sources[0], Target{ClusterName: "c1"}); err == nil || !strings.Contains(err.Error(), "plain/secret.yaml: encrypted with SOPS: its MAC does not match") {
		t.Errorf("an altered file: %v", err)
	}
}

// A decryption Secret holds private keys by name: an unknown name, a value that is no key, a
// public key block, or no key at all is refused, and the message never repeats the value.
func TestDecryptionKeysAreRefusedClearly(t *testing.T) {
	pgpKey := gitserver.NewOpenPGPKey(t, "ops")
	for name, tc := range map[string]struct {
		data map[string][]byte
		want string
	}{
		"unknown name": {map[string][]byte{"key.txt": []byte("AGE-SECRET-KEY-1XYZ")}, "key.txt: name the value <name>.agekey"},
		"no age key":   {map[string][]byte{"ops.agekey": []byte("AGE-SECRET-KEY-1NOTAKEYATALL")}, "ops.agekey: does not hold age identities"},
		"public only":  {map[string][]byte{"ops.asc": []byte(pgpKey.Public)}, "ops.asc: holds no private key"},
		"empty":        {map[string][]byte{}, "holds no decryption key"},
	} {
		_, err := NewDecryptor("secret keys", tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "NOTAKEY") {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// FuzzSOPSFilesFailClosed alters a file the sops command encrypted, byte by byte: whatever the
// repository's author makes of it, decrypting never panics, and what decrypts is what was
// encrypted (a value the key's holder did not write never comes out of it).
func FuzzSOPSFilesFailClosed(f *testing.F) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		f.Fatal(err)
	}
	d, err := NewDecryptor("secret keys", map[string][]byte{"k.agekey": []byte(id.String())})
	if err != nil {
		f.Fatal(err)
	}
	plain := []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: fuzz-password-value}\n")
	f.Add(reftools.SOPSEncrypt(f, "secret.yaml", plain, reftools.SOPSOptions{Age: []string{id.Recipient().String()}}))
	f.Add(reftools.SOPSEncrypt(f, "secret.yaml", plain, reftools.SOPSOptions{Age: []string{id.Recipient().String()}, EncryptedRegex: "^stringData$"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !isSOPS(data) {
			return
		}
		out, err := d.decrypt("secret.yaml", data)
		if err != nil {
			return
		}
		var got struct {
			StringData map[string]any `json:"stringData"`
		}
		if k8syaml.Unmarshal(out, &got) != nil {
			t.Fatalf("decrypted into what does not parse: %q", out)
		}
		for k, v := range got.StringData {
			if k == "password" && v != "fuzz-password-value" {
				t.Fatalf("decrypted a value nobody encrypted: %v", v)
			}
		}
	})
}

// Files that Kustomize's secretGenerator reads, encrypted by the sops command as dotenv and as
// INI, are decrypted as well: the generated Secret holds the plaintext values and nothing of
// SOPS's metadata, in this process and in the sandbox's child; the decryptor reveals them.
func TestSOPSDotenvAndINIFilesRenderDecrypted(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	o := reftools.SOPSOptions{Age: []string{id.Recipient().String()}}
	root := writeRepo(t, map[string]string{
		"kz/fleet.yaml": "defaultNamespace: kz\nkustomize: {dir: base}\n",
		"kz/base/kustomization.yaml": "secretGenerator:\n- {name: env, envs: [api.env]}\n- {name: ini, files: [app.ini]}\n" +
			"generatorOptions: {disableNameSuffixHash: true}\n",
		"kz/base/api.env": string(reftools.SOPSEncrypt(t, "api.env", []byte("API_TOKEN=env-token-value\nREGION=eu\n"), o)),
		"kz/base/app.ini": string(reftools.SOPSEncrypt(t, "app.ini", []byte("[db]\npassword = ini-pass-value\n"), o)),
	})
	for _, file := range []string{"kz/base/api.env", "kz/base/app.ini"} {
		if data, err := os.ReadFile(filepath.Join(root, file)); err != nil || !isSOPS(data) || bytes.Contains(data, []byte("-value")) {
			t.Fatalf("%s is not a SOPS file as the sops command writes it:\n%s", file, data)
		}
	}
	d, err := NewDecryptor("secret keys", map[string][]byte{"ops.agekey": []byte(id.String() + "\n")})
	if err != nil {
		t.Fatal(err)
	}
	for mode, opts := range map[string]RendererOptions{"in process": {Decryption: d}, "sandbox": {Decryption: d, Sandbox: &Sandbox{}}} {
		sources, err := Discover(root, "repo", []string{"kz"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRenderer(root, opts)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Render(context.Background(), &sources[0], Target{ClusterName: "c1"})
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		secrets := map[string]map[string]string{}
		for _, doc := range strings.Split(string(res.Manifest), "\n---\n") {
			var s struct {
				Metadata struct{ Name string }
				Data     map[string][]byte
			}
			if err := k8syaml.Unmarshal([]byte(doc), &s); err == nil && s.Metadata.Name != "" {
				secrets[s.Metadata.Name] = map[string]string{}
				for k, v := range s.Data {
					secrets[s.Metadata.Name][k] = string(v)
				}
			}
		}
		if env := secrets["env"]; env["API_TOKEN"] != "env-token-value" || env["REGION"] != "eu" || len(env) != 2 {
			t.Errorf("%s: the dotenv Secret %v, want API_TOKEN and REGION only, decrypted", mode, env)
		}
		if ini := secrets["ini"]["app.ini"]; !strings.Contains(ini, "password = ini-pass-value") || strings.Contains(ini, "sops") {
			t.Errorf("%s: the INI Secret holds %q", mode, ini)
		}
	}
	for _, v := range []string{"env-token-value", "ini-pass-value"} {
		if !d.Reveals([]byte("a log line with " + v)) {
			t.Errorf("the decryptor does not know %q, a value it decrypted", v)
		}
	}
}

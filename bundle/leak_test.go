package bundle

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
	"github.com/flotilla-dev/flotilla/e2e/reftools"
)

// sopsPassword is what the leak tests' SOPS-encrypted values file holds.
const sopsPassword = "sops-plaintext-Tr0ub4dor&3"

// leakingTemplates are templates written to carry a secret value into a render's error, as a
// repository's author may write them: Helm's fail and required, printf's quoting, the whole
// values printed as YAML and JSON, base64, a value parsed as a template or named as one.
var leakingTemplates = []string{
	`{{ fail .Values.password }}`,
	`{{ fail .Values.fromSecret.token }}`,
	`{{ required (printf "no %s here" .Values.password) .Values.missing }}`,
	`{{ fail (printf "%q" .Values.fromSecret.token) }}`,
	`{{ fail (toYaml .Values) }}`,
	`{{ fail (toJson .Values) }}`,
	`{{ fail (.Values.password | b64enc) }}`,
	`{{ fail (toYaml .Values | b64enc) }}`,
	`{{ fail (printf "%x" .Values.fromSecret.token) }}`,
	`{{ tpl (printf "{{ %s" .Values.password) . }}`,
	`{{ include .Values.fromSecret.token . }}`,
	`{{ fail (.Values.fromSecret.token | squote) }}`,
	`{{ fail (printf "%.12s" .Values.password) }}`,
	"apiVersion: v1\nkind: {{ .Values.fromSecret.token | quote }}\n",
	"{{ .Values.password }}: [unclosed\n",
}

// leakRepo is a chart bundle whose values come from a SOPS-encrypted file and from a Secret
// (valuesFrom), with tmpl as its one template; the renderer decrypts with the identity.
type leakRepo struct {
	encrypted []byte
	decryptor *Decryptor
}

func newLeakRepo(t testing.TB) leakRepo {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecryptor("the fuzz keys", map[string][]byte{"k.agekey": []byte(id.String())})
	if err != nil {
		t.Fatal(err)
	}
	enc := reftools.SOPSEncrypt(t, "secrets.yaml", []byte("password: "+sopsPassword+"\n"), reftools.SOPSOptions{Age: []string{id.Recipient().String()}})
	return leakRepo{encrypted: enc, decryptor: d}
}

// render renders the bundle with tmpl as its template and fromSecret as the Secret's token, and
// returns the error's text ("" when it rendered).
func (l leakRepo) render(t *testing.T, tmpl, fromSecret string) string {
	root := writeRepo(t, map[string]string{
		"app/fleet.yaml":                "helm:\n  chart: ./chart\n  valuesFiles: [secrets.yaml]\n  valuesFrom:\n  - secretKeyRef: {name: app-secrets}\n",
		"app/secrets.yaml":              string(l.encrypted),
		"app/chart/Chart.yaml":          "apiVersion: v2\nname: leak\nversion: 0.1.0\n",
		"app/chart/templates/leak.yaml": tmpl,
	})
	sources, err := Discover(root, "repo", []string{"app"})
	if err != nil || len(sources) != 1 {
		t.Fatalf("discovering the bundle: %v (%d sources)", err, len(sources))
	}
	values := mapResolver{"secret/default/app-secrets": {"fromSecret": map[string]any{"token": fromSecret}}}
	r, err := NewRenderer(root, RendererOptions{Values: values, Decryption: l.decryptor})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Render(context.Background(), &sources[0], Target{ClusterName: "c1", Namespace: "default"})
	if err == nil {
		return ""
	}
	return err.Error()
}

// leakedForm names the form in which text holds secret, read independently of package scrub:
// as it is, quoted as Go and JSON quote it, base64, hex, or its head cut short at the end.
func leakedForm(text, secret string) string {
	if len(secret) < scrub.MinLen {
		return ""
	}
	jsonQuoted, _ := json.Marshal(secret)
	forms := map[string]string{
		"as it is":    secret,
		"Go-quoted":   strings.Trim(strconv.Quote(secret), `"`),
		"JSON-quoted": strings.Trim(string(jsonQuoted), `"`),
		"base64":      base64.StdEncoding.EncodeToString([]byte(secret)),
		"hex":         hex.EncodeToString([]byte(secret)),
	}
	for name, f := range forms {
		if len(f) >= scrub.MinLen && strings.Contains(text, f) {
			return name
		}
	}
	if head := secret[:min(len(secret)-1, 12)]; len(head) >= 8 && strings.HasSuffix(text, head) {
		return "its head, at the end"
	}
	return ""
}

// TestRenderErrorsRevealNoSecret: each leaking template fails the render, or renders, and the
// error names the chart's file without any form of the SOPS plaintext or the Secret's value.
func TestRenderErrorsRevealNoSecret(t *testing.T) {
	l := newLeakRepo(t)
	const fromSecret = "secret-token-4f9a'\"<x>"
	for _, tmpl := range leakingTemplates {
		msg := l.render(t, tmpl, fromSecret)
		if msg == "" {
			t.Errorf("%q rendered: every leaking template is built to fail", tmpl)
			continue
		}
		for _, secret := range []string{sopsPassword, fromSecret} {
			if form := leakedForm(msg, secret); form != "" {
				t.Errorf("%q: the error holds %q (%s): %s", tmpl, secret, form, msg)
			}
		}
		if !strings.Contains(msg, "fleet.yaml") && !strings.Contains(msg, "leak.yaml") {
			t.Errorf("%q: the error names neither fleet.yaml nor the template: %s", tmpl, msg)
		}
	}
}

// FuzzRenderErrorsRevealNoSecret writes templates and Secret values built to leak: whatever
// the template does with the values and whatever the value is, no render error holds the SOPS
// plaintext or the Secret's value in any form an error carries a value in.
func FuzzRenderErrorsRevealNoSecret(f *testing.F) {
	l := newLeakRepo(f)
	for _, tmpl := range leakingTemplates {
		f.Add(tmpl, "secret-token-4f9a")
		f.Add(tmpl, "a\nmulti-line\nsecret value")
		f.Add(tmpl, "spaces and: colons # and hashes")
	}
	f.Fuzz(func(t *testing.T, tmpl, fromSecret string) {
		msg := l.render(t, tmpl, fromSecret)
		for _, secret := range []string{sopsPassword, fromSecret} {
			if form := leakedForm(msg, secret); form != "" {
				t.Fatalf("template %q, value %q: the error holds it (%s): %s", tmpl, secret, form, msg)
			}
		}
	})
}

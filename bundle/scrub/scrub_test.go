package scrub

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestTextRemovesEveryFormOfAValue(t *testing.T) {
	const secret = `s3cr3t "horse" & <battery>/ü?x=1`
	yamlDoc, err := yaml.Marshal(map[string]any{"values": map[string]any{"password": secret, "user": "app"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, text string }{
		{"as it is", "error calling fail: " + secret},
		{"Go-quoted", fmt.Sprintf("value %q is not valid", secret)},
		{"Go-quoted as ASCII", fmt.Sprintf("value %+q is not valid", secret)},
		{"JSON", `{"password":` + mustJSON(secret) + `}`},
		{"YAML of the values", string(yamlDoc)},
		{"YAML single-quoted", "password: '" + strings.ReplaceAll(secret, "'", "''") + "'"},
		{"base64", "data: " + base64.StdEncoding.EncodeToString([]byte(secret))},
		{"base64 inside a longer text, offset 1", base64.StdEncoding.EncodeToString([]byte("x" + secret + "tail"))},
		{"base64 inside a longer text, offset 2", base64.StdEncoding.EncodeToString([]byte("xy" + secret + "tail"))},
		{"base64 URL alphabet", base64.URLEncoding.EncodeToString([]byte("xyz" + secret))},
		{"hex", "0x" + hex.EncodeToString([]byte(secret))},
		{"HEX", strings.ToUpper(hex.EncodeToString([]byte(secret)))},
		{"in a URL's query", "Get \"https://hooks.example/x?token=" + url.QueryEscape(secret) + "\": refused"},
		{"in a URL's path", "https://hooks.example/" + url.PathEscape(secret)},
		{"cut short at the end", "error calling fail: " + secret[:9]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Secrets
			s.Add(secret)
			got := s.Text(tc.text)
			if !strings.Contains(got, Redacted) {
				t.Errorf("nothing redacted in %q", got)
			}
			if leaked := revealedIn(got, secret); leaked != "" {
				t.Errorf("%q still holds the value (%s)", got, leaked)
			}
		})
	}
}

// revealedIn is an independent reading of whether text holds value: as it is, in its longest
// quoted forms, base64 at offset 0, hex, or its first nine bytes.
func revealedIn(text, value string) string {
	for name, f := range map[string]string{
		"as it is": value, "quoted": strings.Trim(fmt.Sprintf("%q", value), `"`), "JSON": strings.Trim(mustJSON(value), `"`),
		"base64": base64.StdEncoding.EncodeToString([]byte(value)), "hex": hex.EncodeToString([]byte(value)), "head": value[:min(len(value), 9)],
	} {
		if len(f) >= MinLen && strings.Contains(text, f) {
			return name
		}
	}
	return ""
}

func mustJSON(v string) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		panic(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		panic(err)
	}
	return string(j)
}

func TestTextLeavesOtherTextAlone(t *testing.T) {
	var s Secrets
	s.Add("hunter2-value", "yes") // "yes" is too short to look for
	for _, text := range []string{
		"bundle app for cluster c1: helm: template: app/templates/cm.yaml:3:4: executing \"x\" at <fail>: yes",
		"",
		"hunter3",
	} {
		if got := s.Text(text); got != text {
			t.Errorf("Text(%q) = %q, want it unchanged", text, got)
		}
	}
	var none *Secrets
	if got := none.Text("a hunter2-value"); got != "a hunter2-value" {
		t.Errorf("a nil Secrets changed the text: %q", got)
	}
}

func TestALongerValueIsReplacedWhole(t *testing.T) {
	var s Secrets
	s.Add("pass-word", "pass-word-and-more")
	if got, want := s.Text("x pass-word-and-more y pass-word z"), "x [redacted] y [redacted] z"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLinesOfAValueAreEachScrubbed(t *testing.T) {
	var s Secrets
	key := "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END KEY-----\n"
	s.Add(key)
	got := s.Text("line 3: found character that cannot start any token: BKcwggSjAgEAAoIBAQC7")
	if strings.Contains(got, "BKcwggSjAgEAAoIBAQC7") {
		t.Errorf("a line of the value stayed: %q", got)
	}
}

func TestErrorReplacesOnlyWhatReveals(t *testing.T) {
	var s Secrets
	s.Add("hunter2-value")
	plain := errors.New("no secret here")
	if got := s.Error(plain); got != plain {
		t.Errorf("an error that reveals nothing was replaced: %v", got)
	}
	inner := errors.New("calling fail: hunter2-value")
	got := s.Error(fmt.Errorf("bundle app: %w", inner))
	if got.Error() != "bundle app: calling fail: [redacted]" {
		t.Errorf("got %q", got)
	}
	if errors.Is(got, inner) || errors.Unwrap(got) != nil {
		t.Error("the scrubbed error unwraps to the error whose text holds the value")
	}
	if s.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

func TestAddTreeRecordsEveryLeaf(t *testing.T) {
	var s Secrets
	s.AddTree(map[string]any{"db": map[string]any{"password": "p4ssw0rd", "port": 54321}, "list": []any{"token-one", true}})
	for _, v := range []string{"p4ssw0rd", "54321", "token-one"} {
		if !s.Reveals([]byte("x " + v + " y")) {
			t.Errorf("%q was not recorded", v)
		}
	}
	if s.Reveals([]byte("true")) {
		t.Error("a boolean leaf was recorded")
	}
}

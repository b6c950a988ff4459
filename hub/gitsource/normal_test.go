package gitsource

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

func TestNormalURL(t *testing.T) {
	for _, tc := range []struct{ in, want, refused string }{
		{in: "https://git.example.com/team-a/app.git", want: "https://git.example.com/team-a/app.git"},
		{in: "HTTPS://Git.Example.COM:443/team-a/app.git", want: "https://git.example.com/team-a/app.git"},
		{in: "https://git.example.com:8443/team-a/app.git", want: "https://git.example.com:8443/team-a/app.git"},
		{in: "https://user:token@git.example.com/team-a/app.git", want: "https://user@git.example.com/team-a/app.git"},
		{in: "https://git.example.com/team-a/%61pp.git", want: "https://git.example.com/team-a/app.git"},
		{in: "https://git.example.com/team-a/a%c3%a9", want: "https://git.example.com/team-a/a%C3%A9"},
		{in: "https://git.example.com/team-a/app/", want: "https://git.example.com/team-a/app/"},
		{in: "ssh://git@Git.Example.com:22/team-a/app.git", want: "ssh://git@git.example.com/team-a/app.git"},
		{in: "git@Git.Example.com:team-a/app.git", want: "git@git.example.com:team-a/app.git"},
		{in: "oci://Registry.example:443/team-a/app", want: "oci://registry.example/team-a/app"},
		{in: "https://[::1]:8443/x.git", want: "https://[::1]:8443/x.git"},
		{in: "https://git.example.com/team-a/../team-b/repo", refused: `".." segment`},
		{in: "ssh://::", refused: "neither a name nor an IPv6 address"},
		{in: "https://[::ffff:10.0.0.1]/x", refused: "neither a name nor an IPv6 address"},
		{in: "https://git..example.com/x", refused: "is not a host name"},
		{in: "https://git.example.com/team-a/./app", refused: `"." segment`},
		{in: "https://git.example.com/team-a/%2e%2e/team-b/repo", refused: "encodes '.'"},
		{in: "https://git.example.com/team-a%2f..%2fteam-b/repo", refused: "encodes '/'"},
		{in: "https://git.example.com/team-a/%5c../team-b", refused: "encodes '\\\\'"},
		{in: "https://git.example.com/team-a//team-b", refused: "empty segment"},
		{in: `https://git.example.com/team-a\..\team-b`, refused: "backslash"},
		{in: "https://git.example.com/team-a/app#../../team-b", refused: "fragment"},
		{in: "https://git.example.com./team-a/app", refused: "ends in a dot"},
		{in: "https://gít.example.com/team-a/app", refused: "not plain ASCII"},
		{in: "git@git.example.com:team-a/../team-b/app", refused: `".." segment`},
		{in: "file:///srv/git/team-b", refused: "scheme"},
		{in: "https://git.example.com/team-a/%zz", refused: "not a URL"},
		{in: "https://git.example.com/team-a/\x00", refused: "control character"},
	} {
		got, err := NormalURL(tc.in)
		switch {
		case tc.refused == "" && (err != nil || got != tc.want):
			t.Errorf("NormalURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("NormalURL(%q) = %q, %v; want refused: %s", tc.in, got, err, tc.refused)
		}
	}
}

// FuzzNormalURLIsOnePlace: whatever address a GitRepo holds, what NormalURL admits is its own
// normal form, and its path, decoded, is the path every server and proxy resolves it to (no dot
// segment, no empty segment, nothing encoded that decodes to a separator).
func FuzzNormalURLIsOnePlace(f *testing.F) {
	for _, s := range []string{"https://git.example.com/team-a/app.git", "HTTPS://h:443/a/%2e%2e/b", "git@h:a/b", "ssh://u@h:22/a//b",
		"https://h/a/%61/%C3%A9/", "oci://r/x?y=1", "https://h/a/.%2e/b", "https://[::1]/x", "ssh://::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		normal, err := NormalURL(raw)
		if err != nil {
			return
		}
		again, err := NormalURL(normal)
		if err != nil || again != normal {
			t.Fatalf("NormalURL(%q) = %q, whose own normal form is %q, %v", raw, normal, again, err)
		}
		p := normal
		if i := strings.Index(p, "://"); i >= 0 {
			p = p[i+3:]
			p = p[strings.IndexAny(p+"/", "/"):]
		} else {
			p = "/" + strings.TrimPrefix(p[strings.Index(p, ":")+1:], "/")
		}
		p, _, _ = strings.Cut(p, "?")
		decoded, err := url.PathUnescape(p)
		if err != nil {
			t.Fatalf("%q: its path %q does not decode: %v", raw, p, err)
		}
		if strings.ContainsAny(decoded, "\\\x00") {
			t.Fatalf("%q: its path decodes to %q", raw, decoded)
		}
		if clean := path.Clean("/" + decoded); clean != strings.TrimSuffix("/"+strings.TrimPrefix(decoded, "/"), "/") && clean != "/"+strings.TrimPrefix(decoded, "/") {
			t.Fatalf("%q admitted as %q: its path %q resolves to %q", raw, normal, decoded, clean)
		}
	})
}

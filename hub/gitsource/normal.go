package gitsource

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// NormalURL is the one form of a repository's address (git over http(s), ssh and git, scp-like
// user@host:path, oci://) that restrictions and allow-lists match: scheme and host in lower
// case, the scheme's default port dropped, no credentials, percent-encoding decoded where it
// encodes an unreserved character and in upper case elsewhere. An address that two servers or a
// proxy between them could read as two different places is refused instead: a `.` or `..`
// segment, an empty segment inside the path, an encoded `/`, `\` or `.`, a backslash, control
// characters, a fragment, a host that is not plain ASCII or ends in a dot. A pattern that allows
// https://host/team-a/.* then allows team-a's repositories and nothing that only reads as such.
func NormalURL(raw string) (string, error) {
	if strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "", errors.New("it holds a control character or a backslash")
	}
	if m := scpLike.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		host, err := normalHost(m[2])
		if err != nil {
			return "", err
		}
		path, err := normalPath(m[3])
		if err != nil {
			return "", err
		}
		return m[1] + host + ":" + path, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("it is not a URL: %w", err)
	}
	scheme := strings.ToLower(u.Scheme)
	port, known := defaultPorts[scheme]
	switch {
	case !known:
		return "", fmt.Errorf("scheme %q is not one of http, https, ssh, git and oci", u.Scheme)
	case u.Opaque != "" || u.Host == "":
		return "", errors.New("it names no host")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "", errors.New("it has a fragment (#)")
	}
	host, err := normalHost(u.Hostname())
	if err != nil {
		return "", err
	}
	if p := u.Port(); p != "" && p != port {
		host = net.JoinHostPort(host, p)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	path, err := normalPath(u.EscapedPath())
	if err != nil {
		return "", err
	}
	out := scheme + "://"
	if u.User != nil && u.User.Username() != "" {
		out += url.PathEscape(u.User.Username()) + "@"
	}
	out += host + path
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out, nil
}

var (
	// scpLike is git's user@host:path (no scheme, a colon before any slash).
	scpLike      = regexp.MustCompile(`^([A-Za-z0-9._~-]+@)?([A-Za-z0-9.-]+):(.*)$`)
	defaultPorts = map[string]string{"https": "443", "http": "80", "ssh": "22", "git": "9418", "oci": "443"}
)

func normalHost(h string) (string, error) {
	h = strings.ToLower(h)
	switch {
	case h == "":
		return "", errors.New("it names no host")
	case strings.HasSuffix(h, "."):
		return "", fmt.Errorf("host %q ends in a dot", h)
	case strings.ContainsFunc(h, func(r rune) bool { return r > 0x7e }):
		return "", fmt.Errorf("host %q is not plain ASCII: write its punycode (xn--) form", h)
	case strings.Contains(h, ":"):
		// Only an IPv6 address holds a colon; anything else would not read back as one host.
		if ip := net.ParseIP(h); ip == nil || ip.To4() != nil {
			return "", fmt.Errorf("host %q is neither a name nor an IPv6 address", h)
		}
	case !hostName.MatchString(h):
		return "", fmt.Errorf("host %q is not a host name (letters, digits, - and _ in dot-separated labels)", h)
	}
	return h, nil
}

// hostName is a host name, or an IPv4 address written as one: labels of letters, digits, - and
// _ (some registries' names have it), separated by single dots.
var hostName = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$`)

// normalPath decodes what percent-encoding need not encode and refuses what reads two ways.
func normalPath(escaped string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(escaped) || !isHex(escaped[i+1]) || !isHex(escaped[i+2]) {
			return "", errors.New("it holds a malformed percent-encoding")
		}
		d := unhex(escaped[i+1])<<4 | unhex(escaped[i+2])
		switch {
		case d == '/' || d == '\\' || d == '.' || d < 0x20 || d == 0x7f:
			return "", fmt.Errorf("it encodes %q in its path (%s), which servers read differently", rune(d), escaped[i:i+3])
		case isUnreserved(d):
			b.WriteByte(d)
		default:
			b.WriteString(strings.ToUpper(escaped[i : i+3]))
		}
		i += 2
	}
	path := b.String()
	segments := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, s := range segments {
		last := i == len(segments)-1
		switch {
		case s == "." || s == "..":
			return "", fmt.Errorf("its path has a %q segment, which a server or a proxy may resolve", s)
		case s == "" && !last && path != "":
			return "", errors.New("its path has an empty segment (//)")
		}
	}
	return path, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~'
}

// Package scrub keeps secret values out of the text people see: errors, conditions, Events, log
// lines, notifications, commit statuses and previews.
//
// A Secrets is fed with the values that must not appear (what a SOPS file decrypted to, a Secret's
// values, a password, a webhook URL) as they are read, and every text that leaves passes through
// it:
//
//	secrets.Add(password)
//	err = secrets.Error(err) // "… [redacted] …"
//
// It is an allow-list of what may be shown only in the sense that matters: it does not look for
// known leaks, it removes the values themselves, in every form an error message carries a value
// in (as it is, quoted and escaped as Go, JSON and YAML quote it, base64 at any alignment, hex,
// URL-escaped, line by line) and the head of one cut short at the end of a text. A value shorter
// than MinLen is not looked for: "1", "yes" and "on" are everywhere. A template that transforms a
// value on purpose (reverses it, spells it out) is beyond what any scrubber can recognise; the
// hub's security model says what stands against that.
//
// A nil *Secrets holds nothing and returns every text as it is. Safe for concurrent use.
package scrub

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// MinLen is the length of the shortest value looked for, and of the shortest form of one.
const MinLen = 4

// Redacted stands where a value was.
const Redacted = "[redacted]"

// Secrets is a set of values that must not appear in text shown to people.
type Secrets struct {
	mu     sync.Mutex
	values map[string]bool
	// forms are every value's forms, longest first; replacer replaces them. Both are built
	// again when a value is added after the last scrub.
	forms    []string
	replacer *strings.Replacer
}

// Add records values; those shorter than MinLen are left out.
func (s *Secrets) Add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if len(v) < MinLen || s.values[v] {
			continue
		}
		if s.values == nil {
			s.values = map[string]bool{}
		}
		s.values[v] = true
		s.replacer = nil
	}
}

// AddTree records the leaves of a decoded YAML or JSON document (maps, lists, scalars) as they
// print: a number of a Secret's values is as secret as a string; true and false are not.
func (s *Secrets) AddTree(tree any) {
	switch t := tree.(type) {
	case nil, bool:
	case map[string]any:
		for _, v := range t {
			s.AddTree(v)
		}
	case []any:
		for _, v := range t {
			s.AddTree(v)
		}
	case string:
		s.Add(t)
	default:
		s.Add(fmt.Sprint(t))
	}
}

// AddAll records the values of other.
func (s *Secrets) AddAll(other *Secrets) {
	if other == nil || other == s {
		return
	}
	other.mu.Lock()
	values := make([]string, 0, len(other.values))
	for v := range other.values {
		values = append(values, v)
	}
	other.mu.Unlock()
	s.Add(values...)
}

// Len is how many values it holds.
func (s *Secrets) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.values)
}

// Text is text with every form of every value replaced by Redacted.
func (s *Secrets) Text(text string) string {
	if s == nil {
		return text
	}
	forms, replacer := s.prepared()
	if replacer == nil {
		return text
	}
	text = replacer.Replace(text)
	return cutTrailingHead(text, forms)
}

// Reveals reports whether text holds a form of a value.
func (s *Secrets) Reveals(text []byte) bool {
	return s.Text(string(text)) != string(text)
}

// Error is err when its text reveals nothing, and otherwise an error of its scrubbed text alone.
// The scrubbed error does not unwrap: the error it replaces is not reachable through it, so no
// errors.As can hand its text on.
func (s *Secrets) Error(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if scrubbed := s.Text(text); scrubbed != text {
		return &scrubbedError{text: scrubbed}
	}
	return err
}

type scrubbedError struct{ text string }

func (e *scrubbedError) Error() string { return e.text }

func (s *Secrets) prepared() ([]string, *strings.Replacer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replacer == nil && len(s.values) > 0 {
		seen := map[string]bool{}
		s.forms = s.forms[:0]
		for v := range s.values {
			for _, f := range Forms(v) {
				if !seen[f] {
					seen[f] = true
					s.forms = append(s.forms, f)
				}
			}
		}
		// Longest first: strings.Replacer takes the first of its pairs that matches at a
		// position, so a value that holds another is replaced whole.
		slices.SortFunc(s.forms, func(a, b string) int {
			if len(a) != len(b) {
				return len(b) - len(a)
			}
			return strings.Compare(a, b)
		})
		pairs := make([]string, 0, 2*len(s.forms))
		for _, f := range s.forms {
			pairs = append(pairs, f, Redacted)
		}
		s.replacer = strings.NewReplacer(pairs...)
	}
	return s.forms, s.replacer
}

// cutTrailingHead replaces the head of a form that ends text: a message cut short at a limit
// (a condition's length, a commit status's 140 characters, a child process's output) ends in
// part of a value.
func cutTrailingHead(text string, forms []string) string {
	for _, f := range forms {
		for n := min(len(f)-1, len(text)); n >= MinLen; n-- {
			if strings.HasSuffix(text, f[:n]) {
				return text[:len(text)-n] + Redacted
			}
		}
	}
	return text
}

// Forms are the texts a value takes in messages: as it is; inside Go's, JSON's and YAML's quotes;
// base64 (standard and URL alphabets) at each of the three alignments it can have inside a longer
// encoded text; hex; URL-escaped; and, for a value of several lines, each line. Forms shorter than
// MinLen are left out.
func Forms(v string) []string {
	var out []string
	add := func(f string) {
		if len(f) >= MinLen && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	forms := func(v string) {
		add(v)
		add(strings.Trim(strconv.Quote(v), `"`))
		add(strings.Trim(strconv.QuoteToASCII(v), `"`))
		if j, err := json.Marshal(v); err == nil {
			add(strings.Trim(string(j), `"`))
		}
		add(strings.ReplaceAll(v, `'`, `''`)) // YAML's and Helm's squote
		add(hex.EncodeToString([]byte(v)))
		add(strings.ToUpper(hex.EncodeToString([]byte(v))))
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			for _, f := range base64Forms(enc, []byte(v)) {
				add(f)
			}
		}
	}
	forms(v)
	if strings.ContainsAny(v, "\r\n") {
		for line := range strings.Lines(v) {
			forms(strings.TrimSpace(line))
		}
	}
	return out
}

// base64Forms are the characters of v's encoding that v alone decides, with v starting at each
// offset modulo 3 of a longer encoded text: b64enc of a whole values file holds a value at any
// alignment, and its padding only at the end.
func base64Forms(enc *base64.Encoding, v []byte) []string {
	out := make([]string, 0, 4)
	out = append(out, enc.EncodeToString(v)) // the value encoded alone, padding included
	for k := range 3 {
		text := enc.EncodeToString(append(make([]byte, k, k+len(v)), v...))
		// Character j holds bits [6j, 6j+6) of the stream; v's bits are [8k, 8(k+len(v))).
		first, end := (8*k+5)/6, 8*(k+len(v))/6
		if end-first >= MinLen+2 {
			out = append(out, text[first:end])
		}
	}
	return out
}

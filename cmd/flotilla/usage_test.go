package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/hub/operate"
)

// Every usage error the parser catches is bad input (exit code 2), as the README promises, and
// an error of a command that ran is not.
func TestUsageErrorsAreBadInput(t *testing.T) {
	cases := []struct {
		args     []string
		badInput bool
		want     string
	}{
		{[]string{"nosuchcmd"}, true, `unknown command "nosuchcmd"`},
		{[]string{"status", "--bogus"}, true, "unknown flag: --bogus"},
		{[]string{"render"}, true, "accepts 1 arg(s), received 0"},
		{[]string{"agent", "install", "--token", "t"}, true, `required flag(s) "cluster-name" not set`},
		{[]string{"plan", "--ready-after", "soon"}, true, "invalid argument"},
		{[]string{"render", "/nonexistent-flotilla-dir"}, true, "/nonexistent-flotilla-dir"},
		{[]string{"version", "-o", "json"}, false, ""},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			u := &usage{}
			root := newRootCommandWith(u)
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(c.args)
			err := u.classify(root.Execute())
			if c.want == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if got := errors.As(err, new(*operate.ErrInput)); got != c.badInput {
				t.Errorf("bad input (exit 2): %v, want %v", got, c.badInput)
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(out.String(), "flotilla ") {
		t.Errorf("--version printed %q (%v)", out.String(), err)
	}
}

func TestApplyFailuresCountOnceTheyStay(t *testing.T) {
	var s failureSettling
	start := time.Unix(0, 0)
	fails := applyFailuresPrefix + "web on dev-1: no matches for kind GitRepo"
	for _, step := range []struct {
		at         time.Duration
		failure    string
		wantCounts bool
	}{
		{0, "the repository does not render: x", true}, // any other failure at once
		{0, fails, false},
		{10 * time.Second, fails, false},
		{16 * time.Second, fails, true},
		{17 * time.Second, applyFailuresPrefix + "another", false}, // a new set starts over
		{18 * time.Second, "", false},
		{19 * time.Second, fails, false},
	} {
		got := s.settled(step.failure, start.Add(step.at))
		if (got != "") != step.wantCounts || got != "" && got != step.failure {
			t.Errorf("at %s, %q: %q", step.at, step.failure, got)
		}
	}
}

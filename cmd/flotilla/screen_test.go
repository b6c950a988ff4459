package main

import (
	"strings"
	"testing"
)

func TestFitScreen(t *testing.T) {
	header := []string{"export KUBECONFIG=/tmp/flotilla-quickstart-1/hub.kubeconfig", "metrics: http://127.0.0.1:9999/metrics"}
	view := "GitRepo a\n  Bundle b\n  Bundle c\n  Bundle d\n"
	cases := []struct {
		name          string
		width, height int
		want          string
	}{
		{"no terminal: everything", 0, 0, strings.Join(header, "\n") + "\n" + view},
		{"it fits", 0, 6, strings.Join(header, "\n") + "\n" + view},
		{"too tall: the header stays, the rest is counted", 0, 5, strings.Join(header, "\n") + "\nGitRepo a\n  Bundle b\n… 2 more lines (a taller window, or flotilla status, shows them)\n"},
		{"smaller than the header", 0, 1, strings.Join(header, "\n") + "\n… 4 more lines (a taller window, or flotilla status, shows them)\n"},
		{"narrow: lines are cut", 12, 0, "export KUBE…\nmetrics: ht…\nGitRepo a\n  Bundle b\n  Bundle c\n  Bundle d\n"},
	}
	for _, c := range cases {
		if got := fitScreen(header, view, c.width, c.height); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}

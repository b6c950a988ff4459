package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"
)

// screen redraws a live view in place. In a terminal a view taller than the window would
// scroll its own top away, with the lines that matter most (the kubeconfig to export, where
// the metrics are): the header always stays, and the view gets the rows that are left.
type screen struct {
	out    io.Writer
	header []string
	// size is the terminal's width and height; ok false when out is no terminal.
	size func() (width, height int, ok bool)
}

func newScreen(out io.Writer, header ...string) *screen {
	s := &screen{out: out, header: header, size: func() (int, int, bool) { return 0, 0, false }}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		s.size = func() (int, int, bool) {
			w, h, err := term.GetSize(int(f.Fd()))
			return w, h, err == nil
		}
	}
	return s
}

// draw clears the screen and shows the header and as much of view as fits.
func (s *screen) draw(view string) {
	w, h, ok := s.size()
	if !ok {
		w, h = 0, 0 // not a terminal: nothing to fit
	}
	fmt.Fprint(s.out, "\033[H\033[2J"+fitScreen(s.header, view, w, h))
}

// fitScreen lays the header and the view out for a window of width × height (0: unbounded):
// lines are cut at the width, and a view with more lines than the rows left under the header
// ends with a line that says how many are not shown.
func fitScreen(header []string, view string, width, height int) string {
	lines := append(append([]string{}, header...), strings.Split(strings.TrimRight(view, "\n"), "\n")...)
	if height > 0 && len(lines) > height {
		rows := max(height-1, len(header)) // the header stays whatever the height
		hidden := len(lines) - rows
		lines = append(lines[:rows:rows], fmt.Sprintf("… %d more lines (a taller window, or flotilla status, shows them)", hidden))
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(cut(l, width))
		b.WriteByte('\n')
	}
	return b.String()
}

// cut shortens a line to width characters (0: as it is).
func cut(line string, width int) string {
	if width <= 0 || utf8.RuneCountInString(line) <= width {
		return line
	}
	r := []rune(line)
	return string(r[:width-1]) + "…"
}

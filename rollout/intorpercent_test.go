package rollout

import (
	"encoding/json"
	"testing"
)

func TestR1_2_ScaleDownRounding(t *testing.T) {
	cases := []struct {
		v    IntOrPercent
		n    int
		want int
	}{
		{Percent(10), 100, 10},
		{Percent(10), 5, 1},    // floor(0.5) = 0, but at least 1 when p > 0
		{Percent(25), 230, 57}, // floor(57.5)
		{Percent(0), 100, 0},   // Decision: "0%" means 0
		{Int(0), 100, 0},
		{Int(7), 5, 5}, // capped at N
		{Percent(100), 40, 40},
		{Percent(1), 0, 0},
		{IntOrPercent{}, 10, 0},
	}
	for _, c := range cases {
		if got := c.v.ScaleDown(c.n); got != c.want {
			t.Errorf("%s of %d = %d, want %d", c.v, c.n, got, c.want)
		}
	}
}

func TestR2_2_ScaleUpRounding(t *testing.T) {
	cases := []struct {
		v    IntOrPercent
		n    int
		want int
	}{
		{Percent(25), 10, 3}, // ceil(2.5)
		{Percent(25), 4, 1},
		{Percent(25), 3, 1},
		{Percent(100), 7, 7},
		{Int(3), 2, 3}, // not capped: surge may exceed N
	}
	for _, c := range cases {
		if got := c.v.ScaleUp(c.n); got != c.want {
			t.Errorf("%s of %d = %d, want %d", c.v, c.n, got, c.want)
		}
	}
}

func TestIntOrPercentJSON(t *testing.T) {
	for in, want := range map[string]IntOrPercent{`5`: Int(5), `"25%"`: Percent(25), `"7"`: Int(7), `null`: {}} {
		var got IntOrPercent
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got != want {
			t.Errorf("%s decoded to %v, want %v", in, got, want)
		}
	}
	for _, bad := range []string{`"ten"`, `"5.5%"`, `true`, `[]`} {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("%s decoded without error to %v", bad, v)
		}
	}
	out, _ := json.Marshal(struct{ A, B IntOrPercent }{Int(3), Percent(50)})
	if string(out) != `{"A":3,"B":"50%"}` {
		t.Errorf("marshal = %s", out)
	}
}

func FuzzParseIntOrPercent(f *testing.F) {
	for _, s := range []string{"5", "25%", "0%", "100%", " 7 ", "-1", "x%", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseIntOrPercent(s)
		if err != nil {
			return
		}
		// Round trip: the rendered form parses to the same value.
		again, err := ParseIntOrPercent(v.String())
		if err != nil || again != v {
			t.Fatalf("%q → %v → %q → %v, %v", s, v, v.String(), again, err)
		}
		if v.validate() == nil {
			for _, n := range []int{0, 1, 7, 100, 1000} {
				if got := v.ScaleDown(n); got < 0 || got > n {
					t.Fatalf("%v.ScaleDown(%d) = %d, outside [0, n]", v, n, got)
				}
			}
		}
	})
}

package rollout

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// IntOrPercent is a count written as an integer (5) or a percentage ("25%"). The zero value is
// "unset"; use Int or Percent to build one.
type IntOrPercent struct {
	value   int
	percent bool
	set     bool
}

// Int is an absolute count.
func Int(n int) IntOrPercent { return IntOrPercent{value: n, set: true} }

// Percent is p percent.
func Percent(p int) IntOrPercent { return IntOrPercent{value: p, percent: true, set: true} }

// ParseIntOrPercent reads "5", "25%" or " 25 % " forms.
func ParseIntOrPercent(s string) (IntOrPercent, error) {
	s = strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return IntOrPercent{}, fmt.Errorf("invalid percentage %q", s)
		}
		return Percent(n), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return IntOrPercent{}, fmt.Errorf("invalid value %q: want an integer or a percentage like \"25%%\"", s)
	}
	return Int(n), nil
}

// IsSet reports whether a value was given.
func (v IntOrPercent) IsSet() bool { return v.set }

// Or returns v if set, else def.
func (v IntOrPercent) Or(def IntOrPercent) IntOrPercent {
	if v.set {
		return v
	}
	return def
}

// IsZero reports whether the value is 0 or 0%.
func (v IntOrPercent) IsZero() bool { return v.set && v.value == 0 }

// String renders the value as written: "5" or "25%".
func (v IntOrPercent) String() string {
	if !v.set {
		return "unset"
	}
	if v.percent {
		return strconv.Itoa(v.value) + "%"
	}
	return strconv.Itoa(v.value)
}

// validate checks the value's range: a count is never negative, a percentage is 0–100.
func (v IntOrPercent) validate() error {
	switch {
	case !v.set:
		return nil
	case v.value < 0:
		return fmt.Errorf("%s is negative", v)
	case v.percent && v.value > 100:
		return fmt.Errorf("%s is above 100%%", v)
	}
	return nil
}

// ScaleDown resolves the value against n the way fleet.yaml's rolloutStrategy does (R1.2): a
// percentage rounds down but is at least 1 when above 0%; 0 and 0% mean 0; the result is at most n.
func (v IntOrPercent) ScaleDown(n int) int {
	if !v.set || v.value <= 0 || n <= 0 {
		return 0
	}
	r := v.value
	if v.percent {
		r = max(v.value*n/100, 1)
	}
	return min(r, n)
}

// ScaleUp resolves the value against n the way a RollingUpdate placement does (R2.2): a
// percentage rounds up. The result is not capped: maxSurge may exceed n.
func (v IntOrPercent) ScaleUp(n int) int {
	if !v.set || v.value <= 0 {
		return 0
	}
	if v.percent {
		return int(math.Ceil(float64(v.value) * float64(n) / 100))
	}
	return v.value
}

// UnmarshalJSON accepts a JSON number or string.
func (v *IntOrPercent) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*v = IntOrPercent{}
		return nil
	}
	var n int
	if err := json.Unmarshal(data, &n); err == nil {
		*v = Int(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(data), Type: reflect.TypeFor[IntOrPercent]()}
	}
	parsed, err := ParseIntOrPercent(s)
	if err != nil {
		// A type error, so that encoding/json adds the field's path (maxUnavailable …), which
		// an error of our own would lose.
		return &json.UnmarshalTypeError{Value: strconv.Quote(s), Type: reflect.TypeFor[IntOrPercent]()}
	}
	*v = parsed
	return nil
}

// Expected describes the values IntOrPercent accepts, for error messages.
func (IntOrPercent) Expected() string { return `an integer or a percentage like "25%"` }

// MarshalJSON writes an integer as a number and a percentage as a string.
func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	switch {
	case !v.set:
		return []byte("null"), nil
	case v.percent:
		return json.Marshal(v.String())
	default:
		return json.Marshal(v.value)
	}
}

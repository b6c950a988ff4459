package bundle

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	k8syaml "sigs.k8s.io/yaml"
)

// FieldError is a problem in an input file, located by file, line and field path.
type FieldError struct {
	File    string
	Line    int
	Field   string
	Message string
	// Err is what went wrong, when it is an error of its own (Message is then empty).
	Err error
}

func (e *FieldError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Field == "" {
		return loc + ": " + msg
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, msg)
}

func (e *FieldError) Unwrap() error { return e.Err }

// decodeStrict decodes YAML into out (a pointer to a struct with json tags). Unknown fields and
// values of the wrong type are errors naming the file, the line and the field path.
func decodeStrict(file string, data []byte, out any) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return &FieldError{File: file, Message: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(root.Content) == 0 {
		return nil // empty file: all defaults
	}
	doc := root.Content[0]
	if err := checkFields(file, doc, reflect.TypeOf(out).Elem(), ""); err != nil {
		return err
	}
	js, err := k8syaml.YAMLToJSON(data)
	if err != nil {
		return &FieldError{File: file, Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(out); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			at, field := locate(doc, jsonPath(te.Field), te.Value)
			return &FieldError{File: file, Line: line(at), Field: field, Message: typeMessage(te)}
		}
		return &FieldError{File: file, Err: err}
	}
	return nil
}

// typeMessage says what a value of the wrong type or form should have been: in the words of a
// type that describes itself (rollout.IntOrPercent), else by its Go type.
func typeMessage(te *json.UnmarshalTypeError) string {
	if d, ok := reflect.Zero(te.Type).Interface().(interface{ Expected() string }); ok {
		return fmt.Sprintf("invalid value %s: want %s", te.Value, d.Expected())
	}
	return fmt.Sprintf("wrong type: %s where %s is expected", te.Value, te.Type)
}

// DecodeFleetYAML reads a fleet.yaml strictly and validates it: every error names the file, and
// where it can, the line and the field.
func DecodeFleetYAML(file string, data []byte) (*FleetYAML, error) {
	var f FleetYAML
	if err := decodeStrict(file, data, &f); err != nil {
		return nil, err
	}
	if err := validateFleet(file, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

var jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

// checkFields walks a YAML node along a Go type and reports the first key the type does not
// have. Types that decode themselves (json.Unmarshaler) and free-form maps are not descended.
func checkFields(file string, n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if n.Tag == "!!null" {
				return nil
			}
			return &FieldError{File: file, Line: n.Line, Field: path, Message: "must be a mapping"}
		}
		fields := jsonFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			ft, ok := fields[key.Value]
			if !ok {
				return &FieldError{File: file, Line: key.Line, Field: join(path, key.Value), Message: "unknown field" + suggestion(key.Value, fields)}
			}
			if err := checkFields(file, val, ft, join(path, key.Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if n.Tag == "!!null" {
				return nil
			}
			return &FieldError{File: file, Line: n.Line, Field: path, Message: "must be a list"}
		}
		for i, item := range n.Content {
			if err := checkFields(file, item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode && n.Tag != "!!null" {
			return &FieldError{File: file, Line: n.Line, Field: path, Message: "must be a mapping"}
		}
		if t.Elem().Kind() == reflect.Interface {
			return nil // free-form values
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkFields(file, n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonFields maps a struct's JSON names to field types, following inlined embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// suggestion names a known field that differs only in case, or by one or two letters.
func suggestion(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	for name := range fields {
		if strings.EqualFold(name, key) {
			return fmt.Sprintf(" (did you mean %q?)", name)
		}
		if d := distance(strings.ToLower(name), strings.ToLower(key)); d < bestD || d == bestD && name < best {
			best, bestD = name, d
		}
	}
	if best != "" && bestD <= 2 {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// distance is the Levenshtein distance.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// jsonPath drops the names of inlined Go structs (Options, TargetMatch …) from a path that
// encoding/json reports, leaving the path as written in the file.
func jsonPath(field string) string {
	var parts []string
	for _, p := range strings.Split(field, ".") {
		if p != "" && (p[0] < 'A' || p[0] > 'Z') {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ".")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// locate follows a dotted JSON field path ("helm.timeoutSeconds") through a YAML node and returns
// the node and the path as written, with list indexes: encoding/json reports
// "partitions.maxUnavailable" for the maxUnavailable of any partition, so in a list the item
// whose value reads as bad (a scalar equal to it, quoted or not) is the one meant.
func locate(n *yaml.Node, path, bad string) (*yaml.Node, string) {
	if path == "" {
		return n, ""
	}
	part, rest, _ := strings.Cut(path, ".")
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value != part {
				continue
			}
			at, sub := locate(n.Content[i+1], rest, bad)
			switch {
			case sub == "":
				return at, part
			case sub[0] == '[':
				return at, part + sub
			}
			return at, part + "." + sub
		}
	case yaml.SequenceNode:
		reads := func(at *yaml.Node) bool { return at.Value == bad || strconv.Quote(at.Value) == bad }
		for _, match := range []func(*yaml.Node) bool{reads, func(*yaml.Node) bool { return true }} {
			for i, item := range n.Content {
				if at, sub := locate(item, path, bad); at != nil && at.Kind == yaml.ScalarNode && match(at) {
					return at, fmt.Sprintf("[%d].%s", i, sub)
				}
			}
		}
	}
	return nil, path
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

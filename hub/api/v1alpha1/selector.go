package v1alpha1

import (
	"bytes"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Selector is a label selector of a stage, a stage's group or a sequence group, written either
// structured (matchLabels, matchExpressions) or in the string form of `kubectl get -l`, such as
// "env=prod,ring notin (canary),!legacy" (R3.6). The API server keeps it as written.
//
// Decoding never fails on the string form, so that a mistyped selector cannot make the object
// unreadable to the hub's caches: the hub parses it when it plans, and a run or sequence whose
// selector does not parse says so in its status.
type Selector struct {
	metav1.LabelSelector `json:",inline"`
	// Text is the selector in string form, when it was written as one.
	Text string `json:"-"`
}

// UnmarshalJSON reads either form.
func (s *Selector) UnmarshalJSON(data []byte) error {
	*s = Selector{}
	if data = bytes.TrimSpace(data); len(data) > 0 && data[0] == '"' {
		return json.Unmarshal(data, &s.Text)
	}
	return json.Unmarshal(data, &s.LabelSelector)
}

// MarshalJSON writes the selector in the form it was written in.
func (s Selector) MarshalJSON() ([]byte, error) {
	if s.Text != "" {
		return json.Marshal(s.Text)
	}
	return json.Marshal(s.LabelSelector)
}

// SelectorOf is the structured selector sel as a Selector.
func SelectorOf(sel metav1.LabelSelector) *Selector { return &Selector{LabelSelector: sel} }

package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// DiffView is what one revision changes against another on one cluster: the rendered objects
// of both, side by side, as the agent receives them (Secrets' values masked).
type DiffView struct {
	Meta
	Bundle  string       `json:"bundle"`
	Cluster string       `json:"cluster"`
	From    int64        `json:"from"`
	To      int64        `json:"to"`
	Objects []ObjectDiff `json:"objects"`
}

// ObjectDiff is one object in either revision.
type ObjectDiff struct {
	Key    string    `json:"key"`
	Change string    `json:"change"` // added, removed, changed, unchanged
	Rows   []DiffRow `json:"rows,omitempty"`
}

// DiffRow is one line of a side-by-side diff: Left from the older revision, Right from the newer.
type DiffRow struct {
	Op    string `json:"op"` // "=", "-", "+", "~"
	Left  string `json:"left,omitempty"`
	Right string `json:"right,omitempty"`
}

// maxDiffLines bounds the lines of one object that are compared line by line (quadratic).
const maxDiffLines = 4000

func (s *Server) diffView(ctx context.Context, v *viewer, bundleName, cluster string, from, to int64) (*DiffView, error) {
	var b v1alpha1.Bundle
	if err := v.Get(ctx, client.ObjectKey{Namespace: v.namespace, Name: bundleName}, &b); err != nil {
		return nil, err
	}
	store := &model.RevisionStore{Content: &contentstore.Store{Client: v.direct}}
	manifests := func(index int64) (map[string]string, error) {
		targets, err := store.Peek(ctx, &b, index)
		if err != nil {
			return nil, err
		}
		t, ok := targets[cluster]
		if !ok {
			return map[string]string{}, nil // the revision deploys nothing there
		}
		data, err := contentstore.Read(ctx, v.direct, b.Namespace, t.Ref.ContentID)
		if err != nil {
			return nil, fmt.Errorf("revision %d: %w", index, err)
		}
		return splitObjects(data)
	}
	left, err := manifests(from)
	if err != nil {
		return nil, err
	}
	right, err := manifests(to)
	if err != nil {
		return nil, err
	}
	out := &DiffView{Meta: s.meta(ctx, v, "diff"), Bundle: b.Name, Cluster: cluster, From: from, To: to, Objects: []ObjectDiff{}}
	keys := make([]string, 0, len(left)+len(right))
	for k := range left {
		keys = append(keys, k)
	}
	for k := range right {
		if _, ok := left[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		l, inLeft := left[k]
		r, inRight := right[k]
		d := ObjectDiff{Key: k}
		switch {
		case !inLeft:
			d.Change = "added"
		case !inRight:
			d.Change = "removed"
		case l == r:
			d.Change = "unchanged"
		default:
			d.Change = "changed"
		}
		if d.Change != "unchanged" {
			d.Rows = sideBySide(lines(l), lines(r))
		}
		out.Objects = append(out.Objects, d)
	}
	return out, nil
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// splitObjects splits a rendered YAML stream into its objects by kind, namespace and name, each
// as YAML with the values of Secrets masked (their digest shows whether they changed).
func splitObjects(stream []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, doc := range bytes.Split(append([]byte("\n"), stream...), []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("object %d of the rendered manifests: %w", i, err)
		}
		if obj == nil {
			continue
		}
		md, _ := obj["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		ns, _ := md["namespace"].(string)
		kind, _ := obj["kind"].(string)
		api, _ := obj["apiVersion"].(string)
		if kind == "Secret" && (api == "v1") {
			for _, field := range []string{"data", "stringData"} {
				if values, ok := obj[field].(map[string]any); ok {
					for k, val := range values {
						sum := sha256.Sum256([]byte(fmt.Sprint(val)))
						values[k] = "(masked, sha256 " + hex.EncodeToString(sum[:])[:12] + ")"
					}
				}
			}
		}
		key := kind + " " + name
		if ns != "" {
			key = kind + " " + ns + "/" + name
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out[key] = string(data)
	}
	return out, nil
}

// sideBySide aligns two texts by their longest common subsequence of lines: equal lines side by
// side, a removed line on the left alone, an added one on the right, a removal followed by an
// addition as one changed row.
func sideBySide(a, b []string) []DiffRow {
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		return []DiffRow{{Op: "~", Left: fmt.Sprintf("(%d lines)", len(a)), Right: fmt.Sprintf("(%d lines: too long to compare line by line)", len(b))}}
	}
	// lcs[i][j] is the LCS length of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var rows []DiffRow
	var removed, added []string
	flush := func() {
		for k := range max(len(removed), len(added)) {
			r := DiffRow{Op: "~"}
			if k < len(removed) {
				r.Left = removed[k]
			} else {
				r.Op = "+"
			}
			if k < len(added) {
				r.Right = added[k]
			} else {
				r.Op = "-"
			}
			rows = append(rows, r)
		}
		removed, added = nil, nil
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			flush()
			rows = append(rows, DiffRow{Op: "=", Left: a[i], Right: b[j]})
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			added = append(added, b[j])
			j++
		default:
			removed = append(removed, a[i])
			i++
		}
	}
	flush()
	return rows
}

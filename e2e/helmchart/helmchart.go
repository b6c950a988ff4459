// Package helmchart packages Helm charts for tests that serve them from a Helm repository or
// an OCI registry on loopback.
package helmchart

import (
	"os"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

// Archive packages chart name at version, with values and one template file per entry of
// templates (file name under templates/ → content), as `helm package` does.
func Archive(t testing.TB, name, version string, values map[string]any, templates map[string]string) []byte {
	t.Helper()
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version}, Values: values}
	for file, content := range templates {
		ch.Templates = append(ch.Templates, &chart.File{Name: "templates/" + file, Data: []byte(content)})
	}
	path, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

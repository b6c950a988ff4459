package bundle

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flotilla-dev/flotilla/agent/healthcheck"
	"github.com/flotilla-dev/flotilla/bundle/analysisexpr"

	"github.com/flotilla-dev/flotilla/rollout"
)

// validateFleet checks what the schema cannot: combinations and references. Errors name the
// file and the field.
func validateFleet(file string, f *FleetYAML) error {
	fail := func(field, format string, args ...any) error {
		return &FieldError{File: file, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	ways := 0
	for _, set := range []bool{f.RolloutStrategy != nil, f.Placement != nil && f.Placement.RollingUpdate != nil, f.StagedUpdate != nil, f.Sequence != nil} {
		if set {
			ways++
		}
	}
	if ways > 1 {
		return fail("", "choose at most one of rolloutStrategy, placement.rollingUpdate, stagedUpdate and sequence")
	}
	if err := rollout.Validate(f.RolloutStrategy, f.Placement); err != nil {
		return fail("", "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if err := validateAnalysis(f); err != nil {
		var fe *analysisexpr.FieldError
		if errors.As(err, &fe) {
			return fail(fe.Field, "%s", fe.Message)
		}
		return err
	}
	if f.StagedUpdate != nil && f.StagedUpdate.Strategy == "" {
		return fail("stagedUpdate.strategy", "is required")
	}
	if f.Sequence != nil && f.Sequence.Name == "" {
		return fail("sequence.name", "is required")
	}
	if err := validateOptions(&f.Options, "", fail); err != nil {
		return err
	}
	for i, tc := range f.TargetCustomizations {
		field := fmt.Sprintf("targetCustomizations[%d]", i)
		if tc.ClusterName == "" && tc.ClusterSelector == nil && tc.ClusterGroup == "" && tc.ClusterGroupSelector == nil {
			return fail(field, "needs clusterName, clusterSelector, clusterGroup or clusterGroupSelector")
		}
		if err := validateOptions(&tc.Options, field+".", fail); err != nil {
			return err
		}
	}
	for i, d := range f.DependsOn {
		if (d.Name == "") == (d.Selector == nil) {
			return fail(fmt.Sprintf("dependsOn[%d]", i), "set exactly one of name and selector")
		}
	}
	return nil
}

func validateOptions(o *Options, prefix string, fail func(field, format string, args ...any) error) error {
	if h := o.Helm; h != nil {
		if strings.HasPrefix(h.Chart, "oci://") && h.Repo != "" {
			return fail(prefix+"helm.repo", "must be empty when chart is an oci:// reference")
		}
		if h.Repo != "" && !strings.HasPrefix(h.Repo, "http://") && !strings.HasPrefix(h.Repo, "https://") {
			return fail(prefix+"helm.repo", "%q is not an http(s) URL", h.Repo)
		}
		if h.Repo != "" && h.Chart == "" {
			return fail(prefix+"helm.chart", "is required with helm.repo")
		}
		if h.TimeoutSeconds < 0 {
			return fail(prefix+"helm.timeoutSeconds", "is negative")
		}
		for i, vf := range h.ValuesFrom {
			if (vf.ConfigMapKeyRef == nil) == (vf.SecretKeyRef == nil) {
				return fail(fmt.Sprintf("%shelm.valuesFrom[%d]", prefix, i), "set exactly one of configMapKeyRef and secretKeyRef")
			}
		}
	}
	if _, err := compileHealthChecks(o.HealthChecks); err != nil {
		var fe *healthcheck.FieldError
		if errors.As(err, &fe) {
			return fail(prefix+"healthChecks"+fe.Field, "%s", fe.Message)
		}
		return fail(prefix+"healthChecks", "%v", err)
	}
	if d := o.Diff; d != nil {
		for i, p := range d.ComparePatches {
			for j, op := range p.Operations {
				field := fmt.Sprintf("%sdiff.comparePatches[%d].operations[%d]", prefix, i, j)
				switch {
				case op.Op != "remove":
					return fail(field+".op", "%q is not supported: remove excludes a field from drift detection, the only operation that does", op.Op)
				case !strings.HasPrefix(op.Path, "/"):
					return fail(field+".path", "%q is not a JSON pointer (like /spec/replicas)", op.Path)
				}
			}
		}
	}
	return nil
}

// compileHealthChecks compiles fleet.yaml's healthChecks as the agent will: what it would
// refuse is refused here, at render.
func compileHealthChecks(checks []HealthCheck) (*healthcheck.Set, error) {
	rules := make([]healthcheck.Rule, len(checks))
	for i, h := range checks {
		rules[i] = healthcheck.Rule(h)
	}
	return healthcheck.Compile(rules)
}

// validateAnalysis compiles the queries and conditions of the bundle's checks as the hub will
// run them (§7).
func validateAnalysis(f *FleetYAML) error {
	if s := f.RolloutStrategy; s != nil {
		if err := analysisexpr.Validate("rolloutStrategy.analysis", s.Analysis); err != nil {
			return err
		}
	}
	if p := f.Placement; p != nil && p.RollingUpdate != nil {
		return analysisexpr.Validate("placement.rollingUpdate.analysis", p.RollingUpdate.Analysis)
	}
	return nil
}

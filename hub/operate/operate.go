// Package operate holds what a person does to a fleet: approve or reject a gate, start, stop or
// resume a run, skip part of it, pause or resume a bundle or a cluster, roll a bundle back, retry
// a quarantined revision, install an agent. The CLI and the dashboard call it, always with a
// client of the person's own identity; tests call the same code.
package operate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/bdstate"
	"github.com/flotilla-dev/flotilla/manifests"
	"github.com/flotilla-dev/flotilla/rollout"
)

// ErrInput marks a request that cannot be carried out as asked (unknown run, gate not reached,
// invalid transition). The CLI exits with code 2 on it, as on any bad input.
type ErrInput struct{ Err error }

func (e *ErrInput) Error() string { return e.Err.Error() }
func (e *ErrInput) Unwrap() error { return e.Err }

func run(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.StagedUpdateRun, error) {
	var r v1alpha1.StagedUpdateRun
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
		return nil, &ErrInput{fmt.Errorf("run %s/%s: %w", ns, name, err)}
	}
	return &r, nil
}

// Gate names a gate of a staged run: its stage, its group for a group gate, and whether it
// is the gate after (else before).
type Gate struct {
	Stage, Group string
	After        bool
}

func (g Gate) String() string {
	when := "before"
	if g.After {
		when = "after"
	}
	if g.Group != "" {
		return fmt.Sprintf("the gate %s group %s of stage %s", when, g.Group, g.Stage)
	}
	return fmt.Sprintf("the gate %s stage %s", when, g.Stage)
}

// Whoami is the user the API server knows the client as: the name an approval records.
func Whoami(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("failed to ask the API server who this is: %w", err)
	}
	return review.Status.UserInfo.Username, nil
}

// approvalRequest reads the request of a run's gate (R3.9): the one the run created when it
// reached the gate.
func approvalRequest(ctx context.Context, c client.Client, ns, runName string, g Gate) (*v1alpha1.ApprovalRequest, error) {
	r, err := run(ctx, c, ns, runName)
	if err != nil {
		return nil, err
	}
	var list v1alpha1.ApprovalRequestList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("failed to list approval requests: %w", err)
	}
	gate := "Before"
	if g.After {
		gate = "After"
	}
	for i := range list.Items {
		s := list.Items[i].Spec
		if s.Run == r.Name && s.Stage == g.Stage && s.Group == g.Group && s.Gate == gate {
			return &list.Items[i], nil
		}
	}
	return nil, &ErrInput{fmt.Errorf("run %s has no approval request for %s (has the run reached it?)", r.Name, g)}
}

// Approve records the caller's approval of a run's gate (R3.9), under the name the API server
// knows them by (Whoami), with a comment. It returns the request's name and whether the caller
// had approved it already. The gate opens once its quorum of distinct people approved.
func Approve(ctx context.Context, c client.Client, ns, runName string, g Gate, comment string) (string, bool, error) {
	me, err := Whoami(ctx, c)
	if err != nil {
		return "", false, err
	}
	var already bool
	name, err := recordOnGate(ctx, c, ns, runName, g, func(st *v1alpha1.ApprovalRequestStatus) (bool, error) {
		if rej := st.Rejection; rej != nil {
			return false, &ErrInput{fmt.Errorf("%s was rejected by %s: %s", g, rej.By, rej.Comment)}
		}
		if st.Approval != nil && st.Approval.By == me || slices.ContainsFunc(st.Approvals, func(a v1alpha1.ApprovalRecord) bool { return a.By == me }) {
			already = true
			return false, nil
		}
		st.Approvals = append(st.Approvals, v1alpha1.ApprovalRecord{By: me, At: metav1.Now(), Comment: comment})
		return true, nil
	})
	return name, already, err
}

// Reject closes a run's gate for good (R3.9): the run stops, its status naming the caller and
// the reason.
func Reject(ctx context.Context, c client.Client, ns, runName string, g Gate, reason string) (string, error) {
	if strings.TrimSpace(reason) == "" {
		return "", &ErrInput{errors.New("a rejection needs a reason")}
	}
	me, err := Whoami(ctx, c)
	if err != nil {
		return "", err
	}
	return recordOnGate(ctx, c, ns, runName, g, func(st *v1alpha1.ApprovalRequestStatus) (bool, error) {
		if rej := st.Rejection; rej != nil {
			return false, &ErrInput{fmt.Errorf("%s was rejected already, by %s: %s", g, rej.By, rej.Comment)}
		}
		st.Rejection = &v1alpha1.ApprovalRecord{By: me, At: metav1.Now(), Comment: reason}
		return true, nil
	})
}

// recordOnGate applies record to the status of a gate's request and writes it, conditional
// on the request as read: people approving at once each get their record in, one after the
// other. record reports whether it changed anything.
func recordOnGate(ctx context.Context, c client.Client, ns, runName string, g Gate, record func(*v1alpha1.ApprovalRequestStatus) (bool, error)) (string, error) {
	for {
		ar, err := approvalRequest(ctx, c, ns, runName, g)
		if err != nil {
			return "", err
		}
		orig := ar.DeepCopy()
		changed, err := record(&ar.Status)
		if err != nil || !changed {
			return ar.Name, err
		}
		err = c.Status().Patch(ctx, ar, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return ar.Name, fmt.Errorf("failed to record on approval request %s: %w", ar.Name, err)
		}
		return ar.Name, nil
	}
}

// SetRunState moves a run to Run or Stop, refusing what R3.7 forbids.
func SetRunState(ctx context.Context, c client.Client, ns, runName string, state v1alpha1.RunAction) error {
	r, err := run(ctx, c, ns, runName)
	if err != nil {
		return err
	}
	if err := rollout.ValidateTransition(rollout.RunAction(r.Spec.State), rollout.RunAction(state), rollout.RunState(r.Status.State)); err != nil {
		return &ErrInput{fmt.Errorf("run %s: %w", r.Name, err)}
	}
	orig := r.DeepCopy()
	r.Spec.State = state
	if err := c.Patch(ctx, r, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to update run %s: %w", r.Name, err)
	}
	return nil
}

// Skip adds a skip to a run (R3.11).
func Skip(ctx context.Context, c client.Client, ns, runName string, skip v1alpha1.RunSkip) error {
	r, err := run(ctx, c, ns, runName)
	if err != nil {
		return err
	}
	orig := r.DeepCopy()
	r.Spec.Skips = append(r.Spec.Skips, skip)
	if err := c.Patch(ctx, r, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to update run %s: %w", r.Name, err)
	}
	return nil
}

// RollbackResult says what a rollback did.
type RollbackResult struct {
	// Run is the staged update run created for it, for bundles rolled out in stages.
	Run string
	// Superseded are the runs in flight that it stopped.
	Superseded []string
}

// Rollback deploys an older revision of a bundle again, exactly as it was rendered then
// (ROLLOUT.md §0: a revision is addressed by index). A continuous rollout rolls it out under the
// bundle's strategy; a staged bundle gets a run for that revision (R3.7), and runs still in
// flight are stopped so they do not push the newer revision on. The next new revision, from the
// next commit, ends the rollback.
func Rollback(ctx context.Context, c client.Client, ns, bundleName string, to int64, by string) (RollbackResult, error) {
	var res RollbackResult
	var bun v1alpha1.Bundle
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bundleName}, &bun); err != nil {
		return res, &ErrInput{fmt.Errorf("bundle %s/%s: %w", ns, bundleName, err)}
	}
	var rev *v1alpha1.BundleRevision
	for i := range bun.Spec.Revisions {
		if bun.Spec.Revisions[i].Index == to {
			rev = &bun.Spec.Revisions[i]
		}
	}
	if rev == nil || rev.TargetsID == "" {
		kept := make([]string, 0, len(bun.Spec.Revisions))
		for _, r := range bun.Spec.Revisions {
			if r.TargetsID != "" {
				kept = append(kept, fmt.Sprint(r.Index))
			}
		}
		return res, &ErrInput{fmt.Errorf("bundle %s: --to-revision %d: not a revision that can be deployed again (available: %s)", bundleName, to, strings.Join(kept, ", "))}
	}
	if bun.Spec.Sequence != nil {
		return res, &ErrInput{fmt.Errorf("bundle %s follows sequence %s: cancel the bad revision there (spec.revisions[].cancelled) instead; groups keep the newest revision they qualified", bundleName, bun.Spec.Sequence.Name)}
	}
	orig := bun.DeepCopy()
	bun.Spec.TargetRevision = &to
	if bun.Annotations == nil {
		bun.Annotations = map[string]string{}
	}
	bun.Annotations[v1alpha1.AnnotationRolledBack] = fmt.Sprintf("to revision %d by %s at %s", to, by, time.Now().UTC().Format(time.RFC3339))
	if err := c.Patch(ctx, &bun, client.MergeFrom(orig)); err != nil {
		return res, fmt.Errorf("failed to roll back bundle %s: %w", bundleName, err)
	}
	if bun.Spec.StagedUpdate == nil {
		return res, nil
	}
	return startRun(ctx, c, &bun, "rollback", to)
}

// startRun starts a run of revision for a staged bundle, named after why (rollback, retry),
// and stops the bundle's runs in flight: the hub's rule of one rollout per bundle (R3.14).
func startRun(ctx context.Context, c client.Client, bun *v1alpha1.Bundle, why string, revision int64) (RollbackResult, error) {
	var res RollbackResult
	ns, bundleName := bun.Namespace, bun.Name
	var runs v1alpha1.StagedUpdateRunList
	if err := c.List(ctx, &runs, client.InNamespace(ns)); err != nil {
		return res, fmt.Errorf("failed to list runs: %w", err)
	}
	res.Run = fmt.Sprintf("%s-%s-%d-%s", bundleName, why, revision, strconv.FormatInt(time.Now().Unix(), 36))
	// The new run is about to start: it supersedes the bundle's runs in flight. Marked now,
	// so that none releases again.
	var ofBundle []v1alpha1.StagedUpdateRun
	for _, r := range runs.Items {
		if r.Spec.Bundle == bundleName {
			ofBundle = append(ofBundle, r)
		}
	}
	now := time.Now()
	refs := append(bdstate.RunRefs(ofBundle), rollout.RunRef{Name: res.Run, Action: rollout.ActionRun, Created: now})
	_, superseded := rollout.Superseding(refs, now)
	for i := range ofBundle {
		r := &ofBundle[i]
		if !slices.Contains(superseded, r.Name) {
			continue
		}
		orig := r.DeepCopy()
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[v1alpha1.AnnotationSupersededBy] = res.Run
		if err := c.Patch(ctx, r, client.MergeFrom(orig)); err != nil {
			return res, fmt.Errorf("failed to stop run %s: %w", r.Name, err)
		}
		res.Superseded = append(res.Superseded, r.Name)
	}
	run := &v1alpha1.StagedUpdateRun{ObjectMeta: metav1.ObjectMeta{Name: res.Run, Namespace: ns},
		Spec: v1alpha1.StagedUpdateRunSpec{Bundle: bundleName, Strategy: bun.Spec.StagedUpdate.Strategy, RevisionIndex: &revision, State: v1alpha1.RunRun}}
	if err := c.Create(ctx, run); err != nil {
		return res, fmt.Errorf("failed to start run %s: %w", res.Run, err)
	}
	return res, nil
}

// Retry lifts the quarantine of a revision that failed and was rolled back (R5.5): the bundle
// records the request (spec.retry) and the revision rolls out again under the bundle's
// strategy; a staged bundle gets a new run for it. The request names who asked.
func Retry(ctx context.Context, c client.Client, ns, bundleName string, revision int64, by string) (RollbackResult, error) {
	var bun v1alpha1.Bundle
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bundleName}, &bun); err != nil {
		return RollbackResult{}, &ErrInput{fmt.Errorf("bundle %s/%s: %w", ns, bundleName, err)}
	}
	var quarantined []string
	found := false
	for _, q := range bun.Status.Quarantined {
		quarantined = append(quarantined, fmt.Sprint(q.Revision))
		found = found || q.Revision == revision
	}
	if !found {
		if len(quarantined) == 0 {
			quarantined = []string{"none"}
		}
		return RollbackResult{}, &ErrInput{fmt.Errorf("bundle %s: --revision %d is not quarantined (quarantined: %s)", bundleName, revision, strings.Join(quarantined, ", "))}
	}
	orig := bun.DeepCopy()
	bun.Spec.Retry = &v1alpha1.RevisionRetry{Revision: revision, At: metav1.Now(), By: by}
	if err := c.Patch(ctx, &bun, client.MergeFrom(orig)); err != nil {
		return RollbackResult{}, fmt.Errorf("failed to retry revision %d of bundle %s: %w", revision, bundleName, err)
	}
	if bun.Spec.StagedUpdate == nil {
		return RollbackResult{}, nil
	}
	return startRun(ctx, c, &bun, "retry", revision)
}

// Pausable names what a person can pause (R1.13): a bundle, whose rollout keeps staging new
// revisions but releases none, or a cluster, which keeps its revisions while others move on.
type Pausable string

const (
	PauseBundle  Pausable = "bundle"
	PauseCluster Pausable = "cluster"
)

// SetPaused pauses or resumes a bundle's rollout or a cluster (spec.paused, R1.13). It reports
// whether it changed anything: pausing what is paused writes nothing.
func SetPaused(ctx context.Context, c client.Client, what Pausable, ns, name string, paused bool) (bool, error) {
	key := client.ObjectKey{Namespace: ns, Name: name}
	// Conditional on the object as read: a pause never undoes a resume made in between.
	lock := client.MergeFromWithOptimisticLock{}
	var obj client.Object
	var field *bool
	var patch func(orig client.Object) error
	switch what {
	case PauseBundle:
		b := &v1alpha1.Bundle{}
		obj, field = b, &b.Spec.Paused
		patch = func(orig client.Object) error { return c.Patch(ctx, b, client.MergeFromWithOptions(orig, lock)) }
	case PauseCluster:
		cl := &v1alpha1.Cluster{}
		obj, field = cl, &cl.Spec.Paused
		patch = func(orig client.Object) error { return c.Patch(ctx, cl, client.MergeFromWithOptions(orig, lock)) }
	default:
		return false, &ErrInput{fmt.Errorf("%q cannot be paused: a bundle or a cluster can", what)}
	}
	if err := c.Get(ctx, key, obj); err != nil {
		return false, &ErrInput{fmt.Errorf("%s %s/%s: %w", what, ns, name, err)}
	}
	if *field == paused {
		return false, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	*field = paused
	if err := patch(orig); err != nil {
		return false, fmt.Errorf("failed to set %s %s paused=%t: %w", what, name, paused, err)
	}
	return true, nil
}

// AgentInstall is what `flotilla agent install` needs to print one cluster's agent manifest.
type AgentInstall struct {
	// Namespace and Token name the ClusterRegistrationToken on the hub.
	Namespace, Token string
	// ClusterName is the cluster's name. ClusterLabels, the operator's, are set on its Cluster
	// on the hub now (created if need be): an agent brings no labels of its own.
	ClusterName   string
	ClusterLabels map[string]string
	// Image replaces the agent image of manifests/agent when set.
	Image string
	// Server and CA, when set, replace the hub address and CA (PEM) the token's Secret gives:
	// where this cluster reaches the hub.
	Server string
	CA     []byte
}

// defaultAgentImage is the image manifests/agent names.
const defaultAgentImage = "ghcr.io/flotilla-dev/flotilla-agent:latest"

// AgentManifest returns manifests/agent with the bootstrap Secret of one cluster: the
// registration token's values and the cluster's name. The cluster's labels go on its Cluster. Applied to the cluster, the
// agent registers on first start and keeps the credentials the hub grants it.
func AgentManifest(ctx context.Context, c client.Client, in AgentInstall) ([]byte, error) {
	if in.ClusterName == "" {
		return nil, &ErrInput{errors.New("--cluster-name is required")}
	}
	if errs := validation.IsDNS1123Subdomain(in.ClusterName); len(errs) > 0 {
		return nil, &ErrInput{fmt.Errorf("--cluster-name %q: %s", in.ClusterName, strings.Join(errs, "; "))}
	}
	var tok v1alpha1.ClusterRegistrationToken
	if err := c.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: in.Token}, &tok); err != nil {
		return nil, &ErrInput{fmt.Errorf("registration token %s/%s: %w", in.Namespace, in.Token, err)}
	}
	if tok.Status.SecretName == "" {
		return nil, &ErrInput{fmt.Errorf("registration token %s/%s has not been issued yet (is the hub running?)", in.Namespace, in.Token)}
	}
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: tok.Status.SecretName}, &secret); err != nil {
		return nil, fmt.Errorf("failed to read the token's secret %s: %w", tok.Status.SecretName, err)
	}
	server, ca := secret.Data[v1alpha1.RegistrationServerKey], secret.Data[v1alpha1.RegistrationCAKey]
	if in.Server != "" {
		server = []byte(in.Server)
	}
	if len(in.CA) > 0 {
		ca = in.CA
	}
	if len(server) == 0 {
		why := "it holds no hub address"
		if ready := meta.FindStatusCondition(tok.Status.Conditions, v1alpha1.ReadyCondition); ready != nil && ready.Status == metav1.ConditionFalse {
			why = ready.Message
		}
		return nil, &ErrInput{fmt.Errorf("registration token %s/%s: %s; pass --api-server-url with the address this cluster reaches the hub at", in.Namespace, in.Token, why)}
	}
	if err := prepareCluster(ctx, c, in.Namespace, in.ClusterName, in.Token, in.ClusterLabels); err != nil {
		return nil, err
	}
	boot := map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": "flotilla-agent-bootstrap", "namespace": "flotilla-system"},
		"data": map[string][]byte{
			v1alpha1.RegistrationTokenKey: secret.Data[v1alpha1.RegistrationTokenKey], v1alpha1.RegistrationServerKey: server,
			v1alpha1.RegistrationCAKey: ca, v1alpha1.RegistrationNamespaceKey: secret.Data[v1alpha1.RegistrationNamespaceKey],
			v1alpha1.RegistrationClusterNameKey: []byte(in.ClusterName), v1alpha1.RegistrationTokenNameKey: []byte(in.Token),
		}}
	bootYAML, err := yaml.Marshal(boot)
	if err != nil {
		return nil, err
	}
	base, err := manifests.Build("agent")
	if err != nil {
		return nil, err
	}
	if in.Image != "" {
		base = bytes.ReplaceAll(base, []byte("image: "+defaultAgentImage), []byte("image: "+in.Image))
	}
	return append(append(base, "---\n"...), bootYAML...), nil
}

// prepareCluster readies the Cluster an agent install is for: it sets the operator's labels
// and, on a Cluster no agent has registered for yet, names the token whose registration may
// claim it (creating the Cluster when labels are given and it does not exist). A Cluster an
// agent registered for already is not given to another token this way: that takes an approval.
func prepareCluster(ctx context.Context, c client.Client, namespace, name, token string, labels map[string]string) error {
	var cl v1alpha1.Cluster
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cl)
	if apierrors.IsNotFound(err) {
		if len(labels) == 0 {
			return nil // the registration creates it
		}
		cl = v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels,
			Annotations: map[string]string{v1alpha1.RegistrationTokenAnnotation: token}}}
		if err := c.Create(ctx, &cl); err != nil {
			return fmt.Errorf("failed to create cluster %s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read cluster %s: %w", name, err)
	}
	orig := cl.DeepCopy()
	if cl.Labels == nil {
		cl.Labels = map[string]string{}
	}
	maps.Copy(cl.Labels, labels)
	if cl.Annotations[v1alpha1.ClientIDAnnotation] == "" {
		if cl.Annotations == nil {
			cl.Annotations = map[string]string{}
		}
		cl.Annotations[v1alpha1.RegistrationTokenAnnotation] = token
	}
	if equality.Semantic.DeepEqual(orig.ObjectMeta, cl.ObjectMeta) {
		return nil
	}
	if err := c.Patch(ctx, &cl, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to prepare cluster %s: %w", name, err)
	}
	return nil
}

// ApproveRegistration lets a held ClusterRegistration take over the Cluster it claims: the
// hub then revokes the Cluster's current agent and grants the registration.
func ApproveRegistration(ctx context.Context, c client.Client, namespace, name string) (cluster string, err error) {
	var reg v1alpha1.ClusterRegistration
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &reg); err != nil {
		return "", &ErrInput{fmt.Errorf("registration %s/%s: %w", namespace, name, err)}
	}
	cond := meta.FindStatusCondition(reg.Status.Conditions, v1alpha1.ReadyCondition)
	if reg.Status.Granted || cond == nil || cond.Reason != v1alpha1.AwaitingApprovalReason {
		return "", &ErrInput{fmt.Errorf("registration %s/%s does not wait for approval", namespace, name)}
	}
	var cl v1alpha1.Cluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: reg.Spec.RequestedClusterName()}, &cl); err != nil {
		return "", fmt.Errorf("failed to read cluster %s: %w", reg.Spec.RequestedClusterName(), err)
	}
	orig := cl.DeepCopy()
	if cl.Annotations == nil {
		cl.Annotations = map[string]string{}
	}
	cl.Annotations[v1alpha1.ApprovedRegistrationAnnotation] = string(reg.UID)
	if err := c.Patch(ctx, &cl, client.MergeFrom(orig)); err != nil {
		return "", fmt.Errorf("failed to approve registration %s on cluster %s: %w", name, cl.Name, err)
	}
	return cl.Name, nil
}

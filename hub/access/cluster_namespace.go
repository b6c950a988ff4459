package access

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// A cluster's namespace on the hub holds its BundleDeployments and its agent's identity. Its
// name carries a hash of the Cluster's namespace and name, so two Clusters never compute the
// same one, and the namespace records its owner: a namespace that exists for another Cluster
// (or for anything else) is never handed to a new one.

// Labels and annotations of cluster namespaces.
const (
	// AnnotationOwnerCluster is "<fleet namespace>/<cluster>" of the Cluster a namespace belongs to.
	AnnotationOwnerCluster = "flotilla.dev/owner-cluster"
	// LabelClusterNamespace marks cluster namespaces, with the fleet namespace as value.
	LabelClusterNamespace = "flotilla.dev/cluster-namespace"
)

// clusterHashLen is how many hex digits of the hash a cluster namespace ends with (40 bits).
const clusterHashLen = 10

// ClusterNamespace is where the BundleDeployments of a cluster registered in a fleet namespace
// live: readable, and unique per fleet namespace and cluster name.
func ClusterNamespace(fleetNamespace, cluster string) string {
	sum := sha256.Sum256([]byte(fleetNamespace + "/" + cluster))
	prefix := strings.ReplaceAll(model.Truncate("cluster-"+fleetNamespace+"-"+cluster, 63-clusterHashLen-1), ".", "-")
	return strings.TrimRight(prefix, "-") + "-" + hex.EncodeToString(sum[:])[:clusterHashLen]
}

// NamespaceConflictError says that a cluster's namespace exists and is not the cluster's.
type NamespaceConflictError struct {
	Namespace, Owner string
}

func (e *NamespaceConflictError) Error() string {
	owner := "something other than a Cluster"
	if e.Owner != "" {
		owner = "Cluster " + e.Owner
	}
	return fmt.Sprintf("namespace %s belongs to %s: it is not handed to another cluster", e.Namespace, owner)
}

// ensureClusterNamespace creates the cluster's namespace, owned by it, or checks that the one
// there is its own.
func ensureClusterNamespace(ctx context.Context, c client.Client, name string, cl *v1alpha1.Cluster) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelClusterNamespace: cl.Namespace},
		Annotations: map[string]string{AnnotationOwnerCluster: model.OwnerOf(cl)}}}
	err := c.Create(ctx, ns)
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("failed to create namespace %s for cluster %s: %w", name, cl.Name, err)
		}
		return nil
	}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		return fmt.Errorf("failed to read namespace %s of cluster %s: %w", name, cl.Name, err)
	}
	if owner := ns.Annotations[AnnotationOwnerCluster]; owner != model.OwnerOf(cl) {
		return &NamespaceConflictError{Namespace: name, Owner: owner}
	}
	return nil
}

// AdmitCluster gives a Cluster its namespace and records it in the Cluster's status: the part
// of registration that involves no agent. A Cluster admitted before namespaces were unique
// moves to its new one (startMove). The hub admits every Cluster (clusterAccessReconciler);
// tests and tools may call it to have the namespace at once.
func AdmitCluster(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) error {
	want := ClusterNamespace(cl.Namespace, cl.Name)
	if cl.Status.Namespace == want {
		return nil // admitted: its namespace was checked then, and only the hub writes the field
	}
	if err := ensureClusterNamespace(ctx, c, want, cl); err != nil {
		return err
	}
	switch cl.Status.Namespace {
	case "":
		orig := cl.DeepCopy()
		cl.Status.Namespace = want
		if err := c.Status().Patch(ctx, cl, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("failed to record namespace of cluster %s: %w", cl.Name, err)
		}
		return nil
	default:
		return startMove(ctx, c, cl, want)
	}
}

// A cluster moves to a new namespace without a gap: its deployments are copied there with
// their status (nothing is applied again, the rollout keeps its place), the agent may mint
// itself the new namespace's identity, and the Cluster then names the new namespace and the
// old one as previous. The agent notices on its next heartbeat, switches and reports the
// namespace it watches (status.agentNamespace); the hub then removes the old namespace
// (finishMove). An agent that finds its deployment gone while its Cluster names another
// namespace follows the move and does not uninstall.

// startMove copies the deployments of cl's current namespace into to and records the move.
func startMove(ctx context.Context, c client.Client, cl *v1alpha1.Cluster, to string) error {
	from := cl.Status.Namespace
	var bds v1alpha1.BundleDeploymentList
	if err := c.List(ctx, &bds, client.InNamespace(from)); err != nil {
		return fmt.Errorf("failed to list the deployments of cluster %s: %w", cl.Name, err)
	}
	for i := range bds.Items {
		old := &bds.Items[i]
		bd := &v1alpha1.BundleDeployment{ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: to, Labels: old.Labels, Annotations: old.Annotations}, Spec: old.Spec}
		if err := c.Create(ctx, bd); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("failed to copy deployment %s of cluster %s: %w", old.Name, cl.Name, err)
			}
			// Copied by an earlier attempt, or a deployment of that name still being removed
			// from the new namespace: the agent would take that one for its deployment and
			// uninstall the workload. The move waits for it to go.
			var existing v1alpha1.BundleDeployment
			if err := c.Get(ctx, client.ObjectKeyFromObject(bd), &existing); err != nil {
				return fmt.Errorf("failed to read deployment %s in %s: %w", bd.Name, to, err)
			}
			if !existing.DeletionTimestamp.IsZero() {
				return fmt.Errorf("cluster %s moves to %s once deployment %s there is removed", cl.Name, to, bd.Name)
			}
			continue
		}
		bd.Status = old.Status
		if err := c.Status().Update(ctx, bd); err != nil {
			return fmt.Errorf("failed to copy the status of deployment %s of cluster %s: %w", old.Name, cl.Name, err)
		}
	}
	if err := grantAgent(ctx, c, cl, to, []rbacv1.Subject{agentSubject(from), agentSubject(to)}, true); err != nil {
		return err
	}
	log.FromContext(ctx).Info("moving cluster to its own namespace", "cluster", model.OwnerOf(cl), "from", from, "to", to, "deployments", len(bds.Items))
	orig := cl.DeepCopy()
	cl.Status.PreviousNamespace, cl.Status.Namespace = from, to
	if err := c.Status().Patch(ctx, cl, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to move cluster %s to namespace %s: %w", cl.Name, to, err)
	}
	// The agent learns of the move at its next renewal of the old namespace's Lease, if there
	// is one (an agent without reads its Cluster at every beat).
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: from, Name: v1alpha1.AgentLeaseName}}
	moved := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.MovedToAnnotation, to)
	if err := c.Patch(ctx, lease, client.RawPatch(types.MergePatchType, []byte(moved))); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to tell the agent of cluster %s of its move: %w", cl.Name, err)
	}
	return nil
}

// finishMove removes the namespace a cluster moved from once its agent reports from the new
// one: the old deployments, the old identity (its tokens stop working) and the namespace.
func finishMove(ctx context.Context, c client.Client, cl *v1alpha1.Cluster) error {
	from := cl.Status.PreviousNamespace
	if from == "" || cl.Status.AgentNamespace != cl.Status.Namespace {
		return nil
	}
	if err := removeClusterNamespace(ctx, c, from); err != nil {
		return err
	}
	log.FromContext(ctx).Info("cluster moved: its agent reports from the new namespace, the old one is removed", "cluster", model.OwnerOf(cl), "removed", from)
	orig := cl.DeepCopy()
	cl.Status.PreviousNamespace = ""
	if err := c.Status().Patch(ctx, cl, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("failed to record the end of the move of cluster %s: %w", cl.Name, err)
	}
	return nil
}

// removeClusterNamespace deletes a cluster namespace's agent identity first (its tokens stop
// working at once), then its deployments and the namespace itself. The deployments are
// deleted one by one rather than left to the namespace's deletion: the hub does not rely on a
// controller manager beside its API server.
func removeClusterNamespace(ctx context.Context, c client.Client, ns string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: AgentServiceAccount, Namespace: ns}}
	if err := c.Delete(ctx, sa); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete the agent identity of %s: %w", ns, err)
	}
	if err := c.DeleteAllOf(ctx, &v1alpha1.BundleDeployment{}, client.InNamespace(ns)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete the deployments in %s: %w", ns, err)
	}
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to delete namespace %s: %w", ns, err)
	}
	return nil
}

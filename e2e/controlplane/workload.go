package controlplane

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NeverReadyLabel on a pod keeps it Running but never Ready in a workload cluster, the way a
// failing readiness probe would: a Deployment whose template carries it never becomes Available.
const NeverReadyLabel = "flotilla.dev/never-ready"

// UnreadyAfterLabel on a pod, with a duration as its value (e.g. "30s"), makes it Ready and then
// NotReady that long after: a Deployment whose template carries it is Available, then is not.
const UnreadyAfterLabel = "flotilla.dev/unready-after"

// simulatedNodeLabel marks the nodes kwok manages.
const simulatedNodeLabel = "flotilla.dev/simulated"

//go:embed kwok-stages.yaml
var kwokStages []byte

// startWorkloadComponents starts the controller manager, the scheduler and kwok, registers the
// simulated nodes and waits until a pod could run: nodes Ready and the default ServiceAccount
// present (pods are rejected without it).
func (c *Cluster) startWorkloadComponents(ctx context.Context, bins *Binaries, nodes int) error {
	p := c.pki
	kcm, err := startProcess("kube-controller-manager", c.dir, bins.ControllerManager,
		"--kubeconfig="+c.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file="+p.path("sa.key"),
		"--root-ca-file="+p.path("ca.crt"),
		"--cluster-signing-cert-file="+p.path("ca.crt"),
		"--cluster-signing-key-file="+p.path("ca.key"),
		"--use-service-account-credentials=false",
		// Simulated nodes have no pod network to allocate.
		"--controllers=*,-nodeipam",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, kcm)
	sched, err := startProcess("kube-scheduler", c.dir, bins.Scheduler,
		"--kubeconfig="+c.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, sched)
	stagesPath := filepath.Join(c.dir, "kwok.yaml")
	if err := os.WriteFile(stagesPath, kwokStages, 0o644); err != nil {
		return fmt.Errorf("failed to write kwok config: %w", err)
	}
	kwok, err := startProcess("kwok", c.dir, bins.Kwok,
		"--kubeconfig="+c.KubeconfigPath,
		"--config="+stagesPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector="+simulatedNodeLabel+"=true",
		"--node-lease-duration-seconds=40",
	)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, kwok)

	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("failed to create client: %w", err)
	}
	for i := 0; i < nodes; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("%s-node-%d", c.Name, i),
			Labels: map[string]string{simulatedNodeLabel: "true", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"},
		}}
		node.Labels["kubernetes.io/hostname"] = node.Name
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("failed to create node %s: %w", node.Name, err)
		}
	}
	readyNodes := func(ctx context.Context) error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: simulatedNodeLabel + "=true"})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready < nodes {
			return fmt.Errorf("%d of %d nodes ready", ready, nodes)
		}
		return nil
	}
	if err := kwok.waitFor(ctx, 60*time.Second, "simulated nodes to become Ready", readyNodes); err != nil {
		return err
	}
	defaultSA := func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	return kcm.waitFor(ctx, 60*time.Second, "the default ServiceAccount", defaultSA)
}

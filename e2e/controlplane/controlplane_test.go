package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/e2e/controlplane"
	"github.com/flotilla-dev/flotilla/e2e/wait"
)

var workload *controlplane.Cluster

// TestMain starts one environment with a workload cluster for the whole package.
func TestMain(m *testing.M) {
	os.Exit(controlplane.RunTests(m, func(ctx context.Context, env *controlplane.Environment) (err error) {
		workload, err = env.StartCluster(ctx, controlplane.ClusterOptions{Name: "workload", Kind: controlplane.Workload})
		return err
	}))
}

func clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(workload.Config())
	if err != nil {
		t.Fatalf("failed to create client: %v", err)
	}
	return cs
}

func deployment(name string, labels map[string]string) *appsv1.Deployment {
	podLabels := map[string]string{"app": name}
	for k, v := range labels {
		podLabels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
			},
		},
	}
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			return d.Status.AvailableReplicas == *d.Spec.Replicas
		}
	}
	return false
}

func TestDeploymentBecomesAvailable(t *testing.T) {
	ctx := t.Context()
	cs := clientset(t)
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("web", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create deployment: %v", err)
	}
	var last *appsv1.Deployment
	var err error
	wait.Until(t, "the deployment is Available", time.Minute, func() bool {
		last, err = cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && available(last)
	}, func() string { return fmt.Sprintf("%+v (read: %v)", last, err) })
}

func TestNeverReadyLabelKeepsDeploymentUnavailable(t *testing.T) {
	ctx := t.Context()
	cs := clientset(t)
	d := deployment("broken", map[string]string{controlplane.NeverReadyLabel: "true"})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create deployment: %v", err)
	}
	// Wait until the pods run (so the simulated kubelet has acted on them), then check that
	// they are not ready and the Deployment is not Available.
	var pods *corev1.PodList
	var err error
	wait.Until(t, "the never-ready pods run", time.Minute, func() bool {
		pods, err = cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=broken"})
		if err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2
	}, func() string { return fmt.Sprintf("%+v (read: %v)", pods, err) })
	got, err := cs.AppsV1().Deployments("default").Get(ctx, "broken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if available(got) || got.Status.ReadyReplicas != 0 {
		t.Fatalf("deployment with %s became ready: %+v", controlplane.NeverReadyLabel, got.Status)
	}
}

func TestUnreadyAfterLabelMakesADeploymentAvailableThenNot(t *testing.T) {
	ctx := t.Context()
	cs := clientset(t)
	d := deployment("flaky", map[string]string{controlplane.UnreadyAfterLabel: "3s"})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create deployment: %v", err)
	}
	var last *appsv1.Deployment
	var err error
	for _, want := range []bool{true, false} {
		wait.Until(t, fmt.Sprintf("the deployment with %s is available=%v", controlplane.UnreadyAfterLabel, want), time.Minute, func() bool {
			last, err = cs.AppsV1().Deployments("default").Get(ctx, "flaky", metav1.GetOptions{})
			return err == nil && available(last) == want && (want || last.Status.ReadyReplicas == 0)
		}, func() string { return fmt.Sprintf("%+v (read: %v)", last, err) })
	}
}

func TestStatefulSetAndJobComplete(t *testing.T) {
	ctx := t.Context()
	cs := clientset(t)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "example.invalid/db:1"}}},
			},
		},
	}
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create statefulset: %v", err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate", Namespace: "default"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "migrate", Image: "example.invalid/migrate:1"}},
		}}},
	}
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create job: %v", err)
	}
	var s *appsv1.StatefulSet
	var j *batchv1.Job
	var sErr, jErr error
	wait.Until(t, "the statefulset is ready and the job done", time.Minute, func() bool {
		s, sErr = cs.AppsV1().StatefulSets("default").Get(ctx, "db", metav1.GetOptions{})
		j, jErr = cs.BatchV1().Jobs("default").Get(ctx, "migrate", metav1.GetOptions{})
		return sErr == nil && jErr == nil && s.Status.ReadyReplicas == 2 && j.Status.Succeeded == 1
	}, func() string {
		return fmt.Sprintf("statefulset %+v (read: %v)\njob %+v (read: %v)", s.Status, sErr, j.Status, jErr)
	})
}

// BenchmarkStartBareCluster measures how long a hub-like cluster (API server alone) takes to
// answer /readyz, with the binaries already built. Figures: README "Measured".
func BenchmarkStartBareCluster(b *testing.B) {
	benchmarkStartCluster(b, controlplane.Bare)
}

// BenchmarkStartWorkloadCluster measures a workload cluster from nothing to a Deployment that is
// Available through the real controllers and simulated nodes.
func BenchmarkStartWorkloadCluster(b *testing.B) {
	benchmarkStartCluster(b, controlplane.Workload)
}

func benchmarkStartCluster(b *testing.B, kind controlplane.Kind) {
	env, err := controlplane.Start(b.Context(), controlplane.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	i := 0
	for b.Loop() {
		i++
		c, err := env.StartCluster(b.Context(), controlplane.ClusterOptions{Name: fmt.Sprintf("bench-%d", i), Kind: kind})
		if err != nil {
			b.Fatal(err)
		}
		if kind == controlplane.Workload {
			cs, err := kubernetes.NewForConfig(c.Config())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := cs.AppsV1().Deployments("default").Create(b.Context(), deployment("web", nil), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			wait.Until(b, "the deployment is Available", time.Minute, func() bool {
				d, err := cs.AppsV1().Deployments("default").Get(b.Context(), "web", metav1.GetOptions{})
				return err == nil && available(d)
			})
		}
		b.StopTimer()
		c.Stop()
		b.StartTimer()
	}
}

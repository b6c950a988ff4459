package faults

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/e2e/bombs"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/wait"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// hungRepos is how many GitRepos of the hostile tenant a hung git server serves.
const hungRepos = 50

// A tenant's hung and hostile sources cost only that tenant: beside 50 GitRepos on a git
// server that accepts connections and never answers, a commit holding a 1 GiB file of zeros
// (1 MiB on the wire), a commit of 60,000 files, an artifact of a 1 GiB file and one of 200,000
// entries, another tenant's repository still picks up each push within its poll interval and a
// few seconds; each hostile GitRepo fails naming the limit it broke and the flag that sets it; the
// hub is never restarted, and its peak resident memory above its steady size is reported
// (README.md beside this file keeps the figures).
func TestATenantsHungAndHostileSourcesCostOnlyThatTenant(t *testing.T) {
	const poll = 2 * time.Second
	c := adminClient(t)
	healthyNS, hostileNS := namespace(t, c), namespace(t, c)
	hub := startHub(t)

	healthy := gitserver.New(t)
	commit := healthy.Commit("main", map[string]string{"app/cm.yaml": configMap(1)})
	healthySrv := healthy.ServeHTTP("", "")
	createGitRepo(t, c, healthyNS, "healthy", v1alpha1.GitRepoSpec{Repo: healthySrv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: poll}})
	waitCommit(t, c, healthyNS, "healthy", commit)
	// The steady size: the hub idle with one tenant, before the hostile one arrives.
	steady := hub.resident()
	hub.peakSince()

	hung := gitserver.New(t)
	hung.Commit("main", map[string]string{"app/cm.yaml": configMap(1)})
	hungSrv, _ := hung.ServeFaulty(gitserver.Fault{Hang: true, EveryRequest: true})
	for i := range hungRepos {
		createGitRepo(t, c, hostileNS, fmt.Sprintf("hung-%02d", i), v1alpha1.GitRepoSpec{Repo: hungSrv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: poll}})
	}
	gitBomb := gitserver.New(t)
	gitBomb.Commit("main", map[string]string{"app/zeros.yaml": strings.Repeat("\x00", 1<<30)})
	createGitRepo(t, c, hostileNS, "git-bomb", v1alpha1.GitRepoSpec{Repo: gitBomb.ServeHTTP("", "").URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: poll}})
	// 60,000 empty files: one blob, a few MiB of trees, past the 50,000 files of a checkout.
	entries := map[string]string{}
	for i := range 60_000 {
		entries[fmt.Sprintf("app/%02d/%d.yaml", i%100, i)] = ""
	}
	gitEntries := gitserver.New(t)
	gitEntries.Commit("main", entries)
	createGitRepo(t, c, hostileNS, "git-entries", v1alpha1.GitRepoSpec{Repo: gitEntries.ServeHTTP("", "").URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: poll}})
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	for _, artifact := range []struct {
		name  string
		files int
		size  int64
	}{{"oci-bomb", 1, 1 << 30}, {"oci-entries", 200_000, 0}} {
		pushLayer(t, host+"/hostile/"+artifact.name+":1.0.0", artifact.files, artifact.size)
		createGitRepo(t, c, hostileNS, artifact.name, v1alpha1.GitRepoSpec{Repo: "oci://" + host + "/hostile/" + artifact.name, Semver: ">=1", PollingInterval: &metav1.Duration{Duration: poll}})
	}

	var latencies []time.Duration
	for i := range 3 {
		commit := healthy.Commit("main", map[string]string{"app/cm.yaml": configMap(i + 2)})
		pushed := time.Now()
		waitCommit(t, c, healthyNS, "healthy", commit)
		latencies = append(latencies, time.Since(pushed).Round(100*time.Millisecond))
	}
	for repo, limit := range map[string]string{"git-bomb": "--git-max-object-bytes", "git-entries": "--checkout-max-files", "oci-bomb": "--checkout-max-bytes", "oci-entries": "--checkout-max-files", "hung-00": "sent nothing"} {
		wait.Until(t, repo+" failing, naming "+limit, 2*time.Minute, func() bool {
			cond := sourceReady(t, c, hostileNS, repo)
			return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, limit)
		}, func() string { return fmt.Sprintf("%+v", sourceReady(t, c, hostileNS, repo)) })
	}
	peak := hub.peakSince()
	if n := hub.processes(); n != 1 {
		t.Errorf("the hub was started %d times: a tenant's sources cost it its process", n)
	}
	t.Logf("the healthy tenant's pushes seen after %v (poll interval %s) beside %d hung repositories and four bombs; the hub's resident memory: steady %d MiB, peak %d MiB (+%d MiB)",
		latencies, poll, hungRepos, steady>>20, peak>>20, (max(peak, steady)-steady)>>20)
}

func namespace(t *testing.T, c client.Client) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func createGitRepo(t *testing.T, c client.Client, ns, name string, spec v1alpha1.GitRepoSpec) {
	t.Helper()
	if err := c.Create(context.Background(), &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
}

func gitRepo(t *testing.T, c client.Client, ns, name string) *v1alpha1.GitRepo {
	var r v1alpha1.GitRepo
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
		t.Logf("GitRepo %s/%s: %v", ns, name, err)
		return &r
	}
	return &r
}

func sourceReady(t *testing.T, c client.Client, ns, name string) *metav1.Condition {
	return meta.FindStatusCondition(gitRepo(t, c, ns, name).Status.Conditions, v1alpha1.SourceReadyCondition)
}

func waitCommit(t *testing.T, c client.Client, ns, name, commit string) {
	t.Helper()
	wait.Until(t, fmt.Sprintf("GitRepo %s at %s", name, commit), 2*time.Minute, func() bool { return gitRepo(t, c, ns, name).Status.Commit == commit },
		func() string { return fmt.Sprintf("%+v", gitRepo(t, c, ns, name).Status) })
}

// pushLayer pushes an artifact of one bomb layer (bombs.Layer) as ref.
func pushLayer(t *testing.T, ref string, files int, size int64) {
	t.Helper()
	layer, err := bombs.Layer(files, size)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(layer, types.OCILayer)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
	"github.com/flotilla-dev/flotilla/e2e/forgeserver"
	"github.com/flotilla-dev/flotilla/e2e/gitserver"
	"github.com/flotilla-dev/flotilla/e2e/reftools"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/contentstore"
)

// A Secret manifest encrypted with SOPS (by the sops command) deploys decrypted, to the
// clusters its bundle targets only: its plaintext is in their Content and in nothing else of the
// hub (no other Content, deployment, Bundle, GitRepo, Cluster or Event, no line of the hub's
// log). A commit encrypted for another key fails with the file named, without plaintext, and
// deploys nothing: the revision before stays.
func TestSOPSSecretsDeployDecryptedToTargetedClustersOnly(t *testing.T) {
	const password = "correct-horse-sops-plaintext"
	ops, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	encrypt := func(recipient *age.X25519Identity, pw string) string {
		plain := "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: " + pw + "}\n"
		return string(reftools.SOPSEncrypt(t, "secret.yaml", []byte(plain), reftools.SOPSOptions{Age: []string{recipient.Recipient().String()}, EncryptedRegex: "^(data|stringData)$"}))
	}
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"db/fleet.yaml":     "defaultNamespace: db\noverrideTargets:\n- clusterSelector: {matchLabels: {env: prod}}\n",
		"db/secret.yaml":    encrypt(ops, password),
		"web/fleet.yaml":    "defaultNamespace: web\n",
		"web/settings.yaml": configMap("blue"),
	})
	srv := up.ServeHTTP("", "")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "prod-1", map[string]string{"env": "prod"})
	registerCluster(t, c, ns, "dev-1", map[string]string{"env": "dev"})
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sops-keys", Namespace: ns}, Data: map[string][]byte{"ops.agekey": []byte(ops.String())}}
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second}, Paths: []string{"db", "web"},
		Decryption: &v1alpha1.Decryption{Provider: v1alpha1.DecryptionSOPS, SecretRef: v1alpha1.LocalObjectReference{Name: "sops-keys"}},
		Targets:    []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	for _, o := range []client.Object{keys, repo} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key, "both bundles rendered", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return r.Status.Commit != "" && cond != nil && cond.Status == metav1.ConditionTrue
	})
	db := deploymentsOf(t, c, ns, "shop-db")
	if len(db) != 1 || db["prod-1"].Spec.Staged.Index != 1 {
		t.Fatalf("the db bundle's deployments: %v, want prod-1's only", db)
	}
	prodContent := db["prod-1"].Spec.Staged.ContentID
	manifest, err := (&contentstore.Store{Client: c}).Get(ctx, ns, prodContent)
	if err != nil || !strings.Contains(string(manifest), "password: "+password) || strings.Contains(string(manifest), "ENC[") {
		t.Fatalf("prod-1's content: %v\n%s", err, manifest)
	}
	if where := exposures(t, c, password, map[string]bool{ns + "/" + prodContent: true}); len(where) > 0 {
		t.Errorf("the plaintext is outside prod-1's content: %v", where)
	}

	// Encrypted for another key: the render fails naming the file, nothing is deployed.
	before := db["prod-1"]
	bad := up.Commit("main", map[string]string{"db/secret.yaml": encrypt(other, "rotated-"+password)})
	got := waitFor(t, c, key, "the commit encrypted for another key fails", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "db/secret.yaml")
	})
	msg := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RenderedCondition).Message
	if !strings.Contains(msg, "encrypted with SOPS: no key of secret sops-keys decrypts it (encrypted for age "+other.Recipient().String()) {
		t.Errorf("Rendered: %s", msg)
	}
	var bun v1alpha1.Bundle
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-db"}, &bun); err != nil || bun.Spec.LatestRevision != 1 || bun.Status.RenderFailure == nil || bun.Status.RenderFailure.Commit != bad {
		t.Errorf("the db Bundle: revision %d, render failure %+v (%v)", bun.Spec.LatestRevision, bun.Status.RenderFailure, err)
	}
	if now := deploymentsOf(t, c, ns, "shop-db")["prod-1"]; now.Spec.Staged != before.Spec.Staged {
		t.Errorf("prod-1 was staged %+v, want %+v kept", now.Spec.Staged, before.Spec.Staged)
	}
	for _, plain := range []string{password, "rotated-" + password} {
		if where := exposures(t, c, plain, map[string]bool{ns + "/" + prodContent: true}); len(where) > 0 {
			t.Errorf("%q is in %v", plain, where)
		}
	}
}

// A repository's author writes a template that fails with the values of a SOPS-encrypted file
// and of a Secret (helm.valuesFrom) in its message: the render fails naming the template, and
// neither value is anywhere people look (GitRepo and Bundle statuses, Events, the hub's log,
// the notification its Alert delivers, the commit status the forge receives); the revision
// before stays deployed.
func TestADecryptedSecretLeavesNoTraceThroughARenderError(t *testing.T) {
	const password, token = "sops-plaintext-9c1e5a", "values-from-secret-77d2b0"
	ops, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	encrypted := string(reftools.SOPSEncrypt(t, "secrets.yaml", []byte("password: "+password+"\n"), reftools.SOPSOptions{Age: []string{ops.Recipient().String()}}))
	up := gitserver.New(t)
	up.Commit("main", map[string]string{
		"app/fleet.yaml":              "defaultNamespace: app\nhelm:\n  chart: ./chart\n  valuesFiles: [secrets.yaml]\n  valuesFrom:\n  - secretKeyRef: {name: app-values}\n",
		"app/secrets.yaml":            encrypted,
		"app/chart/Chart.yaml":        "apiVersion: v2\nname: app\nversion: 0.1.0\n",
		"app/chart/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {color: blue}\n",
	})
	srv := up.ServeHTTP("", "")
	forge := forgeserver.New(t, "forge-token")
	hook := newHookReceiver(t, "hook-key")
	c, _ := startHub(t, Options{})
	ns := namespace(t, c)
	ctx := context.Background()
	registerCluster(t, c, ns, "dev-1", map[string]string{"env": "dev"})
	notifier(t, c, ns, "hook", "render-failures", hook, "hook")
	repo := &v1alpha1.GitRepo{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns}, Spec: v1alpha1.GitRepoSpec{
		Repo: srv.URL + "/repo.git", PollingInterval: &metav1.Duration{Duration: time.Second},
		Decryption:   &v1alpha1.Decryption{Provider: v1alpha1.DecryptionSOPS, SecretRef: v1alpha1.LocalObjectReference{Name: "sops-keys"}},
		CommitStatus: &v1alpha1.CommitStatusSpec{ProviderRef: v1alpha1.LocalSecretReference{Name: "forge"}, Repository: "team/shop"},
		Targets:      []v1alpha1.Target{{Name: "all", ClusterMatch: v1alpha1.ClusterMatch{ClusterSelector: &metav1.LabelSelector{}}}},
	}}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sops-keys", Namespace: ns}, Data: map[string][]byte{"ops.agekey": []byte(ops.String())}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-values", Namespace: ns, Labels: map[string]string{v1alpha1.ValuesFromLabel: "true"}},
			StringData: map[string]string{"values.yaml": "token: " + token + "\n"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forge"}, Data: map[string][]byte{"token": []byte("forge-token")}},
		&v1alpha1.NotificationProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forge"},
			Spec: v1alpha1.NotificationProviderSpec{Type: v1alpha1.ProviderGitHub, Address: forge.URL, SecretRef: &v1alpha1.LocalSecretReference{Name: "forge"}}},
		repo,
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	key := client.ObjectKeyFromObject(repo)
	waitFor(t, c, key, "the first commit rendered", func(r *v1alpha1.GitRepo) bool { return r.Status.Commit != "" })
	before := deploymentsOf(t, c, ns, "shop-app")["dev-1"]

	bad := up.Commit("main", map[string]string{"app/chart/templates/cm.yaml": `{{ fail (printf "cannot connect with %s / %q / %s" .Values.password .Values.token (toYaml .Values | b64enc)) }}`})
	got := waitFor(t, c, key, "the failing commit refused", func(r *v1alpha1.GitRepo) bool {
		cond := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.RenderedCondition)
		return cond != nil && cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "cannot connect with")
	})
	msg := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.RenderedCondition).Message
	if !strings.Contains(msg, "templates/cm.yaml") || !strings.Contains(msg, scrub.Redacted) {
		t.Errorf("Rendered: %s; want the template named and the values redacted", msg)
	}
	waitUntil(t, "the forge has the failing commit's status", func() bool {
		for _, s := range forge.Statuses("github") {
			if s.SHA == bad && strings.HasPrefix(s.Description, "does not render") {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%+v", forge.Statuses("github")) })
	waitUntil(t, "the alert delivered the render failure", func() bool {
		return slices.ContainsFunc(hook.reasons(), func(r string) bool { return strings.Contains(r, string(v1alpha1.EventRenderFailed)) })
	}, func() string { return strings.Join(hook.reasons(), "\n") })

	if now := deploymentsOf(t, c, ns, "shop-app")["dev-1"]; now.Spec.Staged != before.Spec.Staged {
		t.Errorf("dev-1 was staged %+v, want %+v kept", now.Spec.Staged, before.Spec.Staged)
	}
	hook.mu.Lock()
	delivered, _ := json.Marshal(hook.messages)
	hook.mu.Unlock()
	statuses, _ := json.Marshal(forge.Statuses("github"))
	for _, secret := range []string{password, token} {
		// Every form an error could carry it in: as it is, quoted, base64 at each alignment.
		var s scrub.Secrets
		s.Add(secret)
		if where := exposures(t, c, secret, nil); len(where) > 0 {
			t.Errorf("%q is in %v", secret, where)
		}
		for what, text := range map[string]string{"the Rendered condition": msg, "the notifications": string(delivered), "the commit statuses": string(statuses), "the hub's log": hubLogs.String()} {
			if s.Reveals([]byte(text)) {
				t.Errorf("%s reveal %q in some form", what, secret)
			}
		}
	}
}

package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/gitsource"
)

// Poller is what the receiver needs of the source controller (sources.SourceReconciler).
type Poller interface {
	// Follows reports whether this replica's source controller follows the GitRepo at key.
	Follows(ctx context.Context, key string) bool
	// Notify polls the subscriber's GitRepo at once.
	Notify(s gitsource.Subscriber, p gitsource.Push)
	// Forward hands the delivery to the replica that leads the GitRepo's shard.
	Forward(ctx context.Context, s gitsource.Subscriber)
}

// Serve receives git webhooks on addr, in every replica of every shard (a Service reaches
// them all): the leader of the GitRepo's shard polls at once, the others forward the delivery
// to it.
func Serve(ctx context.Context, mgr ctrl.Manager, src Poller, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen for webhooks on %s: %w", addr, err)
	}
	notify := func(s gitsource.Subscriber, p gitsource.Push) {
		select {
		case <-mgr.Elected():
			if src.Follows(ctx, s.Key) {
				src.Notify(s, p)
				return
			}
		default:
		}
		src.Forward(ctx, s)
	}
	followers, err := newWebhookFollowers(ctx, mgr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", &gitsource.Receiver{Subscribers: followers.of(ctx), Notify: notify, Log: ctrl.Log.WithName("webhook")})
	// Senders are untrusted: a slow or idle one must not hold a connection for long.
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		go func() { <-ctx.Done(); _ = server.Close() }()
		if err := server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}))
}

// webhookFollowers finds the GitRepos a webhook delivery concerns, of every shard: a delivery
// for another shard's GitRepo is forwarded to it. Its senders are untrusted, so a delivery
// costs the API server no request unless it names a repository a GitRepo follows, and then at
// most one read of each follower's webhook secret per SecretTTL: a flood of deliveries must not
// load the API server, nor use up the hub's own share of it.
type webhookFollowers struct {
	// repos holds every shard's GitRepos (the shard's own cache holds only its own), indexed
	// by the repository they follow.
	repos client.Reader
	// secrets reads webhook secrets past the cache: the hub caches no Secrets.
	secrets client.Reader
	now     func() time.Time

	mu   sync.Mutex
	read map[types.NamespacedName]webhookSecret
}

// webhookSecret is a webhook secret as read at a time; token is empty when it could not be read.
type webhookSecret struct {
	token string
	at    time.Time
}

// SecretTTL is how long a webhook secret, once read, verifies deliveries: a rotated secret
// takes effect within it (the next poll picks up a push refused meanwhile).
const SecretTTL = 10 * time.Second

// unreadableSecret verifies nothing: a configured but unreadable secret must not open the
// endpoint, so its GitRepo gets a secret nobody can sign with.
const unreadableSecret = "\x00unreadable-webhook-secret"

// gitReposByURL indexes the webhook receiver's GitRepos by the repository they follow
// (gitsource.NormalizeURL of spec.repo).
const gitReposByURL = "spec.repo.normalized"

// newWebhookFollowers starts, with the manager and in every replica, a cache of every shard's
// GitRepos indexed by the repository they follow.
func newWebhookFollowers(ctx context.Context, mgr ctrl.Manager) (*webhookFollowers, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{&v1alpha1.GitRepo{}: {}}})
	if err != nil {
		return nil, fmt.Errorf("failed to create the webhook receiver's cache: %w", err)
	}
	err = c.IndexField(ctx, &v1alpha1.GitRepo{}, gitReposByURL, func(o client.Object) []string {
		return []string{gitsource.NormalizeURL(o.(*v1alpha1.GitRepo).Spec.Repo)}
	})
	if err != nil {
		return nil, fmt.Errorf("failed to index the webhook receiver's gitrepos: %w", err)
	}
	if _, err := c.GetInformer(ctx, &v1alpha1.GitRepo{}); err != nil {
		return nil, fmt.Errorf("failed to set up the webhook receiver's gitrepo cache: %w", err)
	}
	f := &webhookFollowers{repos: c, secrets: mgr.GetAPIReader(), now: time.Now, read: map[types.NamespacedName]webhookSecret{}}
	return f, mgr.Add(everyReplica(c.Start))
}

// of lists the GitRepos following a normalized URL, as the receiver's subscribers.
func (f *webhookFollowers) of(ctx context.Context) func(string) []gitsource.Subscriber {
	return func(normalized string) []gitsource.Subscriber {
		var list v1alpha1.GitRepoList
		if err := f.repos.List(ctx, &list, client.MatchingFields{gitReposByURL: normalized}); err != nil {
			log.FromContext(ctx).Error(err, "failed to look up the gitrepos following a repository for a webhook delivery", "url", normalized)
			return nil
		}
		out := make([]gitsource.Subscriber, 0, len(list.Items))
		for i := range list.Items {
			repo := &list.Items[i]
			s := gitsource.Subscriber{Key: repo.Namespace + "/" + repo.Name, Repo: gitsource.Repo{URL: repo.Spec.Repo, Branch: repo.Spec.Branch, Revision: repo.Spec.Revision, Semver: repo.Spec.Semver},
				AllowUnsigned: repo.Spec.WebhookAllowUnsigned}
			if ref := repo.Spec.WebhookSecretRef; ref != nil {
				s.Secret = f.secret(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: ref.Name})
			}
			out = append(out, s)
		}
		return out
	}
}

// secret is the webhook secret at key, read at most once per SecretTTL.
func (f *webhookFollowers) secret(ctx context.Context, key types.NamespacedName) string {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.read[key]; ok && now.Sub(s.at) < SecretTTL {
		return s.token
	}
	for k, s := range f.read {
		if now.Sub(s.at) >= SecretTTL {
			delete(f.read, k) // GitRepos deleted or changed leave no secret behind
		}
	}
	token := unreadableSecret
	var secret corev1.Secret
	switch err := f.secrets.Get(ctx, key, &secret); {
	case err != nil:
		// Said once per SecretTTL: the operator's answer to "why are our webhooks refused".
		log.FromContext(ctx).Error(err, "webhook secret unreadable: deliveries for the gitrepos that name it are refused", "secret", key.String())
	case len(secret.Data["token"]) == 0:
		log.FromContext(ctx).Info("webhook secret has no token: deliveries for the gitrepos that name it are refused", "secret", key.String())
	default:
		token = string(secret.Data["token"])
	}
	f.read[key] = webhookSecret{token: token, at: now}
	return token
}

// everyReplica is a runnable that runs in every replica, leader or not.
type everyReplica func(context.Context) error

func (r everyReplica) Start(ctx context.Context) error { return r(ctx) }

func (everyReplica) NeedLeaderElection() bool { return false }

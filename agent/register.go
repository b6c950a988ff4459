package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/nacl/box"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/agent/kube"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
)

// RegisterOptions are what an agent needs to join a fleet: the contents of a registration
// token's Secret, and what it asks for.
type RegisterOptions struct {
	Server string
	CA     []byte
	Token  string
	// Namespace is where the token lets it create its ClusterRegistration.
	Namespace string
	// TokenName is the ClusterRegistrationToken Token was issued for.
	TokenName string
	// ClientID identifies this cluster stably (for example its kube-system namespace UID).
	// It is no secret: registering again for a Cluster that has an agent needs an operator's
	// approval, whatever the id.
	ClientID    string
	ClusterName string
	// Timeout bounds the wait for the hub's first answer; default 2m. A registration the hub
	// holds (for approval, or rate-limited) is waited for until ctx ends.
	Timeout time.Duration
	// Waiting, when set, is told why the hub holds the registration, each time that changes.
	Waiting func(reason, message string)
}

// Registration is the hub's answer: credentials that reach only this cluster's resources.
type Registration struct {
	HubConfig                     *rest.Config
	Namespace                     string
	ClusterName, ClusterNamespace string
}

// Register creates a ClusterRegistration with a fresh X25519 public key and waits until the hub
// grants it; the credentials come sealed to that key, so only this agent can open them.
func Register(ctx context.Context, opts RegisterOptions) (*Registration, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate a key: %w", err)
	}
	base := &rest.Config{Host: opts.Server, BearerToken: opts.Token, TLSClientConfig: rest.TLSClientConfig{CAData: opts.CA}}
	hub, err := kube.NewHub(base)
	if err != nil {
		return nil, fmt.Errorf("failed to reach the hub: %w", err)
	}
	registrations := hub.ClusterRegistrations(opts.Namespace)
	sum := sha256.Sum256([]byte(opts.ClientID + "\x00" + hex.EncodeToString(pub[:])))
	reg := &v1alpha1.ClusterRegistration{ObjectMeta: metav1.ObjectMeta{Name: "reg-" + hex.EncodeToString(sum[:])[:20], Namespace: opts.Namespace},
		Spec: v1alpha1.ClusterRegistrationSpec{ClientID: opts.ClientID, ClusterName: opts.ClusterName, TokenName: opts.TokenName, PublicKey: pub[:]}}
	if _, err := registrations.Create(ctx, reg); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("failed to register: %w", err)
	}
	deadline := time.Now().Add(opts.Timeout)
	held := ""
	for {
		if reg, err = registrations.Get(ctx, reg.Name); err != nil {
			return nil, fmt.Errorf("failed to read the registration: %w", err)
		}
		if reg.Status.Granted {
			break
		}
		if cond := meta.FindStatusCondition(reg.Status.Conditions, v1alpha1.ReadyCondition); cond != nil {
			switch cond.Reason {
			case v1alpha1.RegistrationRefusedReason:
				return nil, fmt.Errorf("registration %s refused: %s", reg.Name, cond.Message)
			case v1alpha1.AwaitingApprovalReason, v1alpha1.RateLimitedReason:
				deadline = time.Now().Add(opts.Timeout) // the hub answered: wait on
				if opts.Waiting != nil && cond.Message != held {
					opts.Waiting(cond.Reason, cond.Message)
				}
				held = cond.Message
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the hub did not answer the registration in time")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	token, ok := box.OpenAnonymous(nil, reg.Status.Credentials, pub, priv)
	if !ok {
		return nil, errors.New("the hub's credentials do not open with this agent's key")
	}
	cfg := rest.CopyConfig(base)
	cfg.BearerToken = string(token)
	return &Registration{HubConfig: cfg, Namespace: reg.Status.Namespace, ClusterName: reg.Status.ClusterName, ClusterNamespace: reg.Status.ClusterNamespace}, nil
}

package controlplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// reviewInterval is how often WaitRulesHeld asks again: the authorizer's watch catches up
// within milliseconds.
const reviewInterval = 20 * time.Millisecond

// WaitRulesHeld returns once the API server's authorizer grants the subject of cfg every verb
// of rules, in namespace ("" for a ClusterRole's rules), or fails when ctx ends first. The
// authorizer learns of a Role or binding from its own watch, a moment after the create
// returned; a test that acts as the subject at once is refused now and then, so a test waits
// here, asking the authorizer itself (SelfSubjectAccessReview, which any signed-in subject may).
func WaitRulesHeld(ctx context.Context, cfg *rest.Config, namespace string, rules []rbacv1.PolicyRule) error {
	reviews := kubernetes.NewForConfigOrDie(cfg).AuthorizationV1().SelfSubjectAccessReviews()
	for _, access := range accessOf(namespace, rules) {
		var lastErr error
		held := func(ctx context.Context) (bool, error) {
			answer, err := reviews.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: access}, metav1.CreateOptions{})
			lastErr = err
			return err == nil && answer.Status.Allowed, nil
		}
		if err := wait.PollUntilContextCancel(ctx, reviewInterval, true, held); err != nil {
			return fmt.Errorf("the authorizer does not grant %s yet (last review: %v): %w", describeAccess(access), lastErr, err)
		}
	}
	return nil
}

// accessOf is every access a rule grants, one review each; a rule's resource names narrow it.
func accessOf(namespace string, rules []rbacv1.PolicyRule) []authorizationv1.SelfSubjectAccessReviewSpec {
	var specs []authorizationv1.SelfSubjectAccessReviewSpec
	for _, rule := range rules {
		for _, verb := range rule.Verbs {
			for _, url := range rule.NonResourceURLs {
				specs = append(specs, authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: url, Verb: verb}})
			}
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					resource, subresource, _ := strings.Cut(resource, "/")
					for _, name := range names {
						specs = append(specs, authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
							Namespace: namespace, Verb: verb, Group: group, Resource: resource, Subresource: subresource, Name: name}})
					}
				}
			}
		}
	}
	return specs
}

func describeAccess(spec authorizationv1.SelfSubjectAccessReviewSpec) string {
	if n := spec.NonResourceAttributes; n != nil {
		return n.Verb + " " + n.Path
	}
	r := spec.ResourceAttributes
	what := r.Resource
	if r.Subresource != "" {
		what += "/" + r.Subresource
	}
	if r.Group != "" {
		what += "." + r.Group
	}
	if r.Name != "" {
		what += " " + r.Name
	}
	return fmt.Sprintf("%s %s in namespace %q", r.Verb, what, r.Namespace)
}

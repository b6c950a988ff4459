package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "flotilla.dev", Version: "v1alpha1"}

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme registers every kind of this package with a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&GitRepo{}, &GitRepoList{},
		&HelmOp{}, &HelmOpList{},
		&Bundle{}, &BundleList{},
		&BundleDeployment{}, &BundleDeploymentList{},
		&Cluster{}, &ClusterList{},
		&ClusterGroup{}, &ClusterGroupList{},
		&ClusterRegistrationToken{}, &ClusterRegistrationTokenList{},
		&ClusterRegistration{}, &ClusterRegistrationList{},
		&StagedUpdateStrategy{}, &StagedUpdateStrategyList{},
		&StagedUpdateRun{}, &StagedUpdateRunList{},
		&ApprovalRequest{}, &ApprovalRequestList{},
		&RolloutSequence{}, &RolloutSequenceList{},
		&Content{}, &ContentList{},
		&FleetRestriction{}, &FleetRestrictionList{},
		&AnalysisProvider{}, &AnalysisProviderList{},
		&NotificationProvider{}, &NotificationProviderList{},
		&Alert{}, &AlertList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}

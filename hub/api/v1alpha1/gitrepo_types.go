package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitRepoSpec says which repository, ref and paths to deploy, and to which clusters.
// +kubebuilder:validation:XValidation:rule="[has(self.branch), has(self.revision), has(self.semver)].filter(x, x).size() <= 1",message="set at most one of branch, revision and semver"
// +kubebuilder:validation:XValidation:rule="!(has(self.disablePolling) && self.disablePolling && has(self.syncSchedule))",message="disablePolling and syncSchedule exclude each other: a schedule is a way of polling"
// +kubebuilder:validation:XValidation:rule="!has(self.clientSecretName)",message="clientSecretName is Fleet's: Flotilla's GitRepo names its credentials in secretRef: {name: <secret>}"
// +kubebuilder:validation:XValidation:rule="!has(self.helmSecretName)",message="helmSecretName is Fleet's: Flotilla's GitRepo names the chart repositories' credentials in helmSecretRef: {name: <secret>}"
// +kubebuilder:validation:XValidation:rule="!has(self.helmSecretNameForPaths)",message="helmSecretNameForPaths is Fleet's: Flotilla takes one helmSecretRef per GitRepo, sent only to the hosts of helmRepoURLRegex; split paths that need other credentials into GitRepos of their own"
// +kubebuilder:validation:XValidation:rule="!has(self.webhookSecret)",message="webhookSecret is Fleet's: Flotilla's GitRepo names its webhook secret in webhookSecretRef: {name: <secret>}"
// +kubebuilder:validation:XValidation:rule="!has(self.ociRegistrySecret)",message="ociRegistrySecret is Fleet's: Flotilla keeps rendered bundles as Content in the hub's API server and needs no OCI storage; remove it"
// +kubebuilder:validation:XValidation:rule="!has(self.imageScanInterval)",message="imageScanInterval is Fleet's: Flotilla does not scan image registries; pin images in git and change them by commits"
// +kubebuilder:validation:XValidation:rule="!has(self.imageScanCommit)",message="imageScanCommit is Fleet's: Flotilla does not scan image registries; pin images in git and change them by commits"
// +kubebuilder:validation:XValidation:rule="!has(self.bundles)",message="bundles is Fleet's: Flotilla finds bundles by their fleet.yaml under spec.paths; list the bundles' directories in paths (a fleet.yaml's options replace bundles[].options)"
type GitRepoSpec struct {
	// Repo is the repository URL (https://, http://, ssh:// or scp-like git@host:path), or an
	// OCI artifact holding the repository, oci://registry/path (followed by revision, a tag or
	// a sha256: digest, or by semver; secretRef's username and password log in to the registry).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?|ssh|oci)://[^ ]+$') || self.matches('^[A-Za-z0-9._-]+@[^ :]+:[^ ]+$')",message="must be an http(s):// or ssh:// URL, user@host:path, or oci://registry/path"
	Repo string `json:"repo"`
	// Branch to follow. Default: the remote's HEAD branch.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Branch string `json:"branch,omitempty"`
	// Revision pins a tag or a commit SHA.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Revision string `json:"revision,omitempty"`
	// Semver follows the newest tag that satisfies this constraint, e.g. ">=1.2.0 <2.0.0" or "~1.4".
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Semver string `json:"semver,omitempty"`
	// Paths are globs of directories holding bundles; default: the repository root.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Paths []string `json:"paths,omitempty"`

	// SecretRef names a Secret with git credentials: username/password (basic or token),
	// or ssh-privatekey with known_hosts.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// HelmSecretRef names a Secret with credentials for Helm repositories referenced by bundles.
	// +optional
	HelmSecretRef *LocalObjectReference `json:"helmSecretRef,omitempty"`
	// HelmRepoURL is the chart server helmSecretRef's credentials are for: they are sent to its
	// scheme and host (with port) exactly, such as https://charts.example.com or
	// oci://registry.example.com, and to no other server a bundle names. http only when given
	// as http here.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	HelmRepoURL string `json:"helmRepoURL,omitempty"`
	// HelmRepoURLRegex (Fleet's) admits instead the Helm repository and OCI registry URLs it
	// matches as a whole (an RE2 expression, anchored at both ends), over https and oci only.
	// With helmSecretRef, one of helmRepoURL and helmRepoURLRegex is required: the
	// credentials go to no server a repository's author names.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	HelmRepoURLRegex string `json:"helmRepoURLRegex,omitempty"`
	// CABundle is a PEM bundle trusted for HTTPS git and Helm servers.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// InsecureSkipTLSVerify disables TLS verification. Explicit opt-in only.
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`

	// DisablePolling stops the periodic checks of the remote: the repository syncs when it is
	// created or changed, on its webhooks, and after a failure (backing off), as Fleet's
	// disablePolling does.
	// +optional
	DisablePolling bool `json:"disablePolling,omitempty"`
	// PollingInterval between checks of the remote. Default 15s. Ignored when SyncSchedule is set.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="pollingInterval must be at least 1s"
	PollingInterval *metav1.Duration `json:"pollingInterval,omitempty"`
	// SyncSchedule syncs at the times of a cron schedule instead of polling at an interval.
	// +optional
	SyncSchedule *SyncSchedule `json:"syncSchedule,omitempty"`
	// SyncWindows decide when new revisions may be released.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	SyncWindows []SyncWindow `json:"syncWindows,omitempty"`
	// WebhookSecretRef names a Secret whose "token" verifies webhook deliveries for this repo.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`
	// WebhookAllowUnsigned lets webhook deliveries without a valid signature trigger a poll of
	// this repository. Explicit opt-in only: anyone who reaches the hub's webhook endpoint can
	// then make it poll (never deploy anything the repository does not hold). Such a delivery
	// is answered 401 all the same, as every delivery no secret verified is. Without it, a
	// GitRepo without webhookSecretRef is not triggered by webhooks at all.
	// +optional
	WebhookAllowUnsigned bool `json:"webhookAllowUnsigned,omitempty"`
	// Verify requires the commits, or the tags, the GitRepo deploys to be signed by one of the
	// keys it names. A commit that is not is neither checked out nor rendered: the GitRepo says
	// which commit, why and which keys were allowed, and what is deployed stays. A
	// FleetRestriction with requireVerifiedSources makes it mandatory in its namespace.
	// +optional
	Verify *SourceVerification `json:"verify,omitempty"`
	// Decryption decrypts the repository's files encrypted with SOPS when they are rendered,
	// with the private keys of a Secret of the GitRepo's namespace. Without it, a bundle that
	// reads such a file does not render.
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`

	// Targets are the clusters the bundles of this repository deploy to.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Targets []Target `json:"targets,omitempty"`
	// CommitStatus reports the rollout of each commit to the repository's forge, as a commit
	// status: pending while it rolls out, success once every targeted cluster is Ready,
	// failure with the reason when it fails, is rolled back or does not render.
	// +optional
	CommitStatus *CommitStatusSpec `json:"commitStatus,omitempty"`
	// Paused stops releasing new revisions; new commits are still fetched and rendered (R1.13).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// RevisionHistoryLimit is how many revisions each bundle keeps. Default 10.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// What a GitRepo sets for every bundle of its repository, over each bundle's fleet.yaml
	// (Fleet's GitRepo fields, with Fleet's meaning).
	BundleDefaults `json:",inline"`
	// Fleet's GitRepo fields that Flotilla does not take, each refused with what replaces it.
	RefusedFleetFields `json:",inline"`
}

// BundleDefaults are what a GitRepo sets for every bundle of its repository, as Fleet's GitRepo
// does: a namespace, a ServiceAccount and a sync generation replace each bundle's;
// keepResources and deleteNamespace, when set, hold for every bundle; correctDrift, when
// enabled, replaces each bundle's.
type BundleDefaults struct {
	// TargetNamespace is the namespace every bundle deploys into: fleet.yaml's namespace,
	// replaced for every bundle and every target customization. A cluster-scoped object, or
	// one of another namespace, then fails its bundle.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`
	// ServiceAccount is the ServiceAccount, in the agent's namespace of each cluster, every
	// bundle is applied as (fleet.yaml's serviceAccount, replaced). FleetRestrictions still
	// decide which ServiceAccounts a namespace's bundles may name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// KeepResources keeps every bundle's objects on its clusters when the bundle goes.
	// +optional
	KeepResources bool `json:"keepResources,omitempty"`
	// DeleteNamespace deletes every bundle's namespace on its clusters when the bundle goes.
	// +optional
	DeleteNamespace bool `json:"deleteNamespace,omitempty"`
	// CorrectDrift, enabled, makes the agents put back what was changed outside Flotilla, for
	// every bundle.
	// +optional
	CorrectDrift *CorrectDrift `json:"correctDrift,omitempty"`
	// ForceSyncGeneration, changed, deploys every bundle again on every cluster (a new
	// deployment of the same content).
	// +optional
	ForceSyncGeneration int64 `json:"forceSyncGeneration,omitempty"`
}

// CorrectDrift says whether and how agents undo changes made outside Flotilla.
type CorrectDrift struct {
	// Enabled applies the revision again when its objects drift.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Force replaces an object that cannot be patched back (deleted and created).
	// +optional
	Force bool `json:"force,omitempty"`
	// KeepFailHistory keeps the record of failed corrections.
	// +optional
	KeepFailHistory bool `json:"keepFailHistory,omitempty"`
}

// RefusedFleetFields are the fields of Fleet's GitRepo that Flotilla does not take. They are in
// the schema only so that the API server answers a GitRepo written for Fleet, for each of them
// at once, with what replaces it (the rules on GitRepoSpec) rather than "unknown field".
type RefusedFleetFields struct {
	// ClientSecretName is Fleet's; refused: Flotilla's is secretRef.
	// +optional
	ClientSecretName string `json:"clientSecretName,omitempty"`
	// HelmSecretName is Fleet's; refused: Flotilla's is helmSecretRef.
	// +optional
	HelmSecretName string `json:"helmSecretName,omitempty"`
	// HelmSecretNameForPaths is Fleet's; refused: one helmSecretRef per GitRepo.
	// +optional
	HelmSecretNameForPaths string `json:"helmSecretNameForPaths,omitempty"`
	// WebhookSecret is Fleet's; refused: Flotilla's is webhookSecretRef.
	// +optional
	WebhookSecret string `json:"webhookSecret,omitempty"`
	// OCIRegistrySecret is Fleet's; refused: Flotilla needs no OCI storage.
	// +optional
	OCIRegistrySecret string `json:"ociRegistrySecret,omitempty"`
	// ImageScanInterval is Fleet's; refused: Flotilla does not scan images.
	// +optional
	ImageScanInterval *metav1.Duration `json:"imageScanInterval,omitempty"`
	// ImageScanCommit is Fleet's; refused: Flotilla does not scan images.
	// +optional
	ImageScanCommit *FleetImageScanCommit `json:"imageScanCommit,omitempty"`
	// Bundles is Fleet's; refused: Flotilla finds bundles under paths.
	// +optional
	Bundles []FleetBundlePath `json:"bundles,omitempty"`
}

// FleetImageScanCommit is Fleet's imageScanCommit, as Fleet's documentation writes it.
type FleetImageScanCommit struct {
	// +optional
	AuthorName string `json:"authorName,omitempty"`
	// +optional
	AuthorEmail string `json:"authorEmail,omitempty"`
	// +optional
	MessageTemplate string `json:"messageTemplate,omitempty"`
}

// FleetBundlePath is an entry of Fleet's bundles list.
type FleetBundlePath struct {
	// +optional
	Base string `json:"base,omitempty"`
	// +optional
	Options string `json:"options,omitempty"`
}

// CommitStatusScope is what one commit status reports on.
type CommitStatusScope string

const (
	// CommitStatusPerBundle: one status per bundle, context flotilla/<bundle>.
	CommitStatusPerBundle CommitStatusScope = "Bundle"
	// CommitStatusPerGitRepo: one status for the commit, context flotilla/<gitrepo>: failure
	// when a bundle failed, pending while one rolls out, success once all completed.
	CommitStatusPerGitRepo CommitStatusScope = "GitRepo"
)

// CommitStatusSpec is where a GitRepo's commit statuses go.
type CommitStatusSpec struct {
	// ProviderRef names a NotificationProvider of the GitRepo's namespace of type github,
	// gitlab, gitea or bitbucket: the forge's API and the token, from that namespace.
	ProviderRef LocalSecretReference `json:"providerRef"`
	// Scope is Bundle (default) or GitRepo.
	// +optional
	// +kubebuilder:validation:Enum=Bundle;GitRepo
	Scope CommitStatusScope `json:"scope,omitempty"`
	// Repository is the repository's path on the forge (owner/name; a GitLab project's full
	// path); default: the path of spec.repo.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+$`
	Repository string `json:"repository,omitempty"`
}

// SyncSchedule is a cron schedule with a time zone.
type SyncSchedule struct {
	// Cron is a standard five-field cron expression or a descriptor (@hourly, @every 5m).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|@every ([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+|[0-9A-Za-z*?/,-]+( +[0-9A-Za-z*?/,-]+){4})$`
	Cron string `json:"cron"`
	// TimeZone is an IANA time zone name; default UTC.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z_]*(/[A-Za-z0-9_+-]+)*$`
	TimeZone string `json:"timeZone,omitempty"`
}

// SyncWindowKind says whether a window allows or denies releases.
// +kubebuilder:validation:Enum=Allow;Deny
type SyncWindowKind string

const (
	SyncWindowAllow SyncWindowKind = "Allow"
	SyncWindowDeny  SyncWindowKind = "Deny"
)

// SyncWindow allows or denies releasing new revisions while it is open. With Allow windows,
// releases happen only inside one; a Deny window always wins.
type SyncWindow struct {
	Kind       SyncWindowKind `json:"kind"`
	CronWindow `json:",inline"`
}

// GitRepoStatus reports the source and the rollout of every bundle of the repository.
type GitRepoStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Commit is the commit currently rendered into bundles.
	// +optional
	Commit string `json:"commit,omitempty"`
	// LastPollTime is when the remote was last checked.
	// +optional
	LastPollTime *metav1.Time `json:"lastPollTime,omitempty"`
	// LastWebhookTime is when a webhook delivery last woke this repository.
	// +optional
	LastWebhookTime *metav1.Time `json:"lastWebhookTime,omitempty"`
	// Bundles is the number of bundles rendered from the current commit.
	// +optional
	Bundles int32 `json:"bundles,omitempty"`
	// Summary counts BundleDeployments of all bundles per state.
	// +optional
	Summary StateCounts `json:"summary,omitempty"`
	// +optional
	Display Display `json:"display,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GitRepo is a git repository whose fleet.yaml bundles Flotilla deploys.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=flotilla,path=gitrepos,singular=gitrepo
// +kubebuilder:printcolumn:name="Repo",type=string,JSONPath=`.spec.repo`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.commit`
// +kubebuilder:printcolumn:name="Bundles",type=integer,JSONPath=`.status.bundles`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.display.readyClusters`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.display.state`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.display.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GitRepo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GitRepoSpec   `json:"spec"`
	Status GitRepoStatus `json:"status,omitempty"`
}

// GitRepoList is a list of GitRepos.
// +kubebuilder:object:root=true
type GitRepoList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GitRepo `json:"items"`
}

// VerificationMode says what a GitRepo's signatures are checked on.
// +kubebuilder:validation:Enum=Commit;Tag;CommitAndTag
type VerificationMode string

const (
	// VerifyCommit: the commit deployed must be signed.
	VerifyCommit VerificationMode = "Commit"
	// VerifyTag: the annotated tag a tag-following GitRepo (semver, or a revision naming a tag)
	// deploys must be signed; the commits need not be.
	VerifyTag VerificationMode = "Tag"
	// VerifyCommitAndTag: both.
	VerifyCommitAndTag VerificationMode = "CommitAndTag"
)

// VerifiesCommits: the mode checks the commit deployed (Commit, the default, and CommitAndTag).
func (m VerificationMode) VerifiesCommits() bool { return m != VerifyTag }

// VerifiesTags: the mode checks the annotated tag a tag-following GitRepo resolves to.
func (m VerificationMode) VerifiesTags() bool { return m == VerifyTag || m == VerifyCommitAndTag }

// SourceVerification names the public keys a GitRepo's commits or tags must be signed with.
// +kubebuilder:validation:XValidation:rule="has(self.secretRef) != has(self.configMapRef)",message="name the keys in exactly one of secretRef and configMapRef"
type SourceVerification struct {
	// Mode is what is verified; default Commit.
	// +optional
	// +kubebuilder:default=Commit
	Mode VerificationMode `json:"mode,omitempty"`
	// SecretRef or ConfigMapRef names an object of the GitRepo's namespace whose every value
	// is an armored OpenPGP public key block (one or more keys) or SSH public keys, one per
	// line as in authorized_keys. Adding a key lets its commits through from the next sync.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// +optional
	ConfigMapRef *LocalObjectReference `json:"configMapRef,omitempty"`
}

// DecryptionProvider is the tool a repository's files are encrypted with.
// +kubebuilder:validation:Enum=sops
type DecryptionProvider string

// DecryptionSOPS: files encrypted with SOPS (YAML and JSON; age and OpenPGP keys).
const DecryptionSOPS DecryptionProvider = "sops"

// Decryption names the keys a GitRepo's encrypted files are decrypted with.
type Decryption struct {
	// Provider is sops.
	// +kubebuilder:default=sops
	Provider DecryptionProvider `json:"provider"`
	// SecretRef names a Secret of the GitRepo's namespace whose values are private keys: age
	// identities (a name ending in .agekey) or an armored OpenPGP private key without a
	// passphrase (.asc).
	SecretRef LocalObjectReference `json:"secretRef"`
}

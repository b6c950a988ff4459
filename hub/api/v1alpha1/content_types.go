package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Content holds rendered manifests, gzip-compressed, named by their content id and shared by
// every revision and cluster that renders to the same manifests. Content larger than one object
// may hold is split into chunks: the object named <id> holds chunk 0 and the totals, <id>-1 …
// <id>-(chunks-1) the rest. Content is immutable.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.size`
// +kubebuilder:printcolumn:name="Chunks",type=integer,JSONPath=`.chunks`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Content struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// ContentID is the id of the whole content (the first chunk's name).
	ContentID string `json:"contentID"`
	// Chunk is this object's position; Chunks and Size are set on chunk 0.
	// +kubebuilder:validation:Minimum=0
	Chunk int32 `json:"chunk"`
	// +optional
	Chunks int32 `json:"chunks,omitempty"`
	// Size is the uncompressed size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// SHA256 of the uncompressed manifests, hex.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// Data is this chunk of the gzip stream.
	Data []byte `json:"data"`
}

// ContentList is a list of Contents.
// +kubebuilder:object:root=true
type ContentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Content `json:"items"`
}

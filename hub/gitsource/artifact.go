package gitsource

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ConfigMediaType is the config of an artifact BuildArtifact makes.
const ConfigMediaType types.MediaType = "application/vnd.flotilla.config.v1+json"

// BuildArtifact packs a directory of a fleet repository into an OCI artifact: one gzipped tar
// layer of its regular files, executables and symbolic links (.git left out), written
// reproducibly (sorted, no times or owners), so that the same directory is the same digest.
// annotations go on the manifest (org.opencontainers.image.source, .revision, …).
func BuildArtifact(dir string, annotations map[string]string) (v1.Image, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		if p != dir && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	for _, p := range names {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		info, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		h := &tar.Header{Name: rel, Format: tar.FormatPAX}
		switch {
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(data)), 0o644
			if info.Mode()&0o111 != 0 {
				h.Mode = 0o755
			}
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, target, 0o777
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s is neither a file nor a symbolic link", rel)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, ConfigMediaType)
	img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(buf.Bytes(), ContentMediaType),
		Annotations: map[string]string{"org.opencontainers.image.title": "content.tar.gz"}})
	if err != nil {
		return nil, err
	}
	if len(annotations) > 0 {
		img = mutate.Annotations(img, annotations).(v1.Image)
	}
	return img, nil
}

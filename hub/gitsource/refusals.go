package gitsource

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrCommitRefused: a commit or an artifact was refused for a limit before, under the limits
// in effect now; it is not fetched again until the branch or tag moves to other content.
var ErrCommitRefused = errors.New("refused before, not fetched again until the branch moves")

// refusedForLimit says whether err refuses content for one of the hub's limits: the same
// content is refused again, however often it is fetched.
func refusedForLimit(err error) bool {
	return errors.Is(err, ErrObjectTooLarge) || errors.Is(err, ErrPackTooManyObjects) ||
		errors.Is(err, ErrCheckoutTooLarge) || errors.Is(err, ErrCheckoutTooManyFiles)
}

// limitsInEffect names the limits a refusal was made under: raised, they allow the content
// again.
func (c *Client) limitsInEffect() string {
	p, l := c.packLimits(), c.limits()
	return fmt.Sprintf("objects %d bytes, %d objects; checkouts %d bytes, %d files", p.objectBytes, p.objects, l.bytes, l.files)
}

func (c *Client) refusalPath(repo Repo, id string) string {
	return filepath.Join(c.repoDir(repo), "refused-"+id)
}

// refusal is the remembered refusal of content id of repo, or nil. The caller holds the
// cache's lock.
func (c *Client) refusal(repo Repo, id string) error {
	data, err := os.ReadFile(c.refusalPath(repo, id))
	if err != nil {
		return nil
	}
	limits, why, _ := strings.Cut(string(data), "\n")
	if limits != c.limitsInEffect() {
		_ = os.Remove(c.refusalPath(repo, id))
		return nil
	}
	return fmt.Errorf("%s of %s: %w: %s", shortCommit(id), SanitizeURL(repo.URL), ErrCommitRefused, why)
}

// remember records err as the refusal of content id of repo when it refuses it for a limit,
// and returns err. The caller holds the cache's lock.
func (c *Client) remember(repo Repo, id string, err error) error {
	if refusedForLimit(err) {
		_ = os.WriteFile(c.refusalPath(repo, id), []byte(c.limitsInEffect()+"\n"+err.Error()), 0o600)
	}
	return err
}

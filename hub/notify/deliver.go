package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/bundle/scrub"
	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/endpoint"
	"github.com/flotilla-dev/flotilla/hub/metrics"
)

// DefaultTimeout bounds one delivery attempt when the provider sets none.
const DefaultTimeout = 10 * time.Second

// maxAnswer is how much of a provider's answer is read (for the error it may explain).
const maxAnswer = 64 << 10

// Endpoint is a provider resolved: where and how to post.
type Endpoint struct {
	Type    v1alpha1.NotificationProviderType
	URL     string
	Token   string
	HMACKey []byte
	Client  *http.Client
	Timeout time.Duration
	Suspend bool
	// Secrets are what no error of a delivery may show: the token, the HMAC key, and an
	// address read from a Secret (a Slack or Teams webhook URL is a credential).
	Secrets *scrub.Secrets
}

// SignatureHeader carries generic-hmac's signature: "sha256=" and the hex HMAC-SHA256 of the
// body under the provider's hmacKey.
const SignatureHeader = "X-Signature"

// Sign is the signature of body under key, as SignatureHeader carries it.
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// deliver posts a job's message to its provider, retrying with backoff; once it gives up, the
// provider's status says why.
func (d *Dispatcher) deliver(ctx context.Context, j job) {
	ep, err := d.dir.Provider(ctx, j.alertNS, j.provider)
	if err != nil {
		d.dir.ReportAlert(ctx, j.alertNS, j.alertName, "ProviderNotFound", err.Error())
		metrics.Notifications.WithLabelValues("unresolved", "failed").Inc()
		return
	}
	d.dir.ReportAlert(ctx, j.alertNS, j.alertName, "", "")
	if ep.Suspend {
		return
	}
	body, contentType, err := payload(ep.Type, j.msg)
	if err != nil {
		metrics.Notifications.WithLabelValues(string(ep.Type), "failed").Inc()
		return
	}
	wait := d.Backoff
	for attempt := 1; ; attempt++ {
		err = ep.post(ctx, body, contentType)
		if err == nil {
			metrics.Notifications.WithLabelValues(string(ep.Type), "delivered").Inc()
			d.dir.ReportProvider(ctx, j.alertNS, j.provider, nil)
			return
		}
		var final *finalError
		if attempt >= Attempts || errors.As(err, &final) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 2
	}
	log.FromContext(ctx).Info("notification not delivered", "provider", j.alertNS+"/"+j.provider, "alert", j.alertName, "reason", j.msg.Reason, "error", err.Error())
	metrics.Notifications.WithLabelValues(string(ep.Type), "failed").Inc()
	d.dir.ReportProvider(ctx, j.alertNS, j.provider, err)
}

// finalError is an answer that another attempt would not change (a 4xx but 408 and 429).
type finalError struct{ error }

// post sends one attempt.
func (ep *Endpoint) post(ctx context.Context, body []byte, contentType string) error {
	req, err := http.NewRequest(http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return ep.scrubbed(&finalError{err})
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "flotilla-hub")
	if ep.Token != "" {
		req.Header.Set("Authorization", "Bearer "+ep.Token)
	}
	if ep.Type == v1alpha1.ProviderGenericHMAC {
		req.Header.Set(SignatureHeader, Sign(ep.HMACKey, body))
	}
	return ep.send(ctx, req, "provider")
}

// send sends a request to the endpoint within its timeout. Its error is final when another
// attempt would not change the answer (a redirect, a 4xx but 408 and 429), and shows none of the
// endpoint's secrets: Go's transport errors quote the whole URL, and an answer may quote the
// request.
func (ep *Endpoint) send(ctx context.Context, req *http.Request, who string) error {
	timeout := ep.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := ep.Client.Do(req.WithContext(ctx))
	if err != nil {
		if errors.Is(err, endpoint.ErrRedirect) {
			return ep.scrubbed(&finalError{err})
		}
		return ep.scrubbed(fmt.Errorf("%s unreachable: %w", who, err))
	}
	defer resp.Body.Close()
	answer, _ := endpoint.ReadBody(resp.Body, maxAnswer)
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("the %s answered %s: %s", who, resp.Status, truncate(strings.TrimSpace(ep.Secrets.Text(string(answer))), 200))
	if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
		return ep.scrubbed(&finalError{err})
	}
	return ep.scrubbed(err)
}

// scrubbed is err without the endpoint's secrets in its text, final when err was.
func (ep *Endpoint) scrubbed(err error) error {
	out := ep.Secrets.Error(err)
	if final := (*finalError)(nil); out != err && errors.As(err, &final) {
		return &finalError{out}
	}
	return out
}

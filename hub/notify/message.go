package notify

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/hub/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/events"
	"github.com/flotilla-dev/flotilla/hub/model"
)

// Message is what an alert sends of one event, before a provider gives it its shape.
type Message struct {
	// Summary is the alert's summary line, rendered; may be empty.
	Summary   string    `json:"summary,omitempty"`
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Reason    string    `json:"reason"`
	Severity  string    `json:"severity"`
	Message   string    `json:"message"`
	Time      time.Time `json:"time"`
	// Link is the dashboard's page of the object, when the hub knows the dashboard's address.
	Link string `json:"link,omitempty"`
}

func severity(t events.Told) string {
	if t.Type == corev1.EventTypeWarning {
		return string(v1alpha1.SeverityError)
	}
	return string(v1alpha1.SeverityInfo)
}

// newMessage is the message of an event; dashboard is the dashboard's base URL or "".
func newMessage(t events.Told, dashboard string) Message {
	m := Message{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, Reason: t.Reason, Severity: severity(t), Message: t.Note, Time: t.Time.UTC()}
	if dashboard != "" {
		route := []string{t.Namespace}
		if t.Kind == "Bundle" || t.Kind == "Cluster" {
			route = append(route, strings.ToLower(t.Kind), t.Name)
		}
		for i := range route {
			route[i] = url.PathEscape(route[i])
		}
		m.Link = strings.TrimSuffix(dashboard, "/") + "/#/" + strings.Join(route, "/")
	}
	return m
}

// title is the message's first line: the summary, or what happened to which object.
func (m Message) title() string {
	if m.Summary != "" {
		return m.Summary
	}
	return fmt.Sprintf("%s %s/%s: %s", m.Kind, m.Namespace, m.Name, m.Reason)
}

// payload is a message in a provider's shape, and its content type.
func payload(typ v1alpha1.NotificationProviderType, m Message) ([]byte, string, error) {
	var body any
	contentType := "application/json"
	switch typ {
	case v1alpha1.ProviderSlack:
		body = slackPayload(m)
	case v1alpha1.ProviderMSTeams:
		body = teamsPayload(m)
	case v1alpha1.ProviderGenericHMAC:
		body = m
	case v1alpha1.ProviderCloudEvents:
		body, contentType = cloudEvent(m), "application/cloudevents+json"
	default:
		return nil, "", fmt.Errorf("unknown provider type %q", typ)
	}
	data, err := json.Marshal(body)
	return data, contentType, err
}

// slackEscaper escapes what Slack's mrkdwn reads as markup: names and messages come from
// repositories, and must not become links or mentions.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// slackEscape is repository text for mrkdwn: its markup escaped, and no bare URL or @name
// Slack would link by itself.
func slackEscape(s string) string { return slackEscaper.Replace(model.Unlinked(s)) }

// slackPayload is an incoming webhook's message: text (the notification's fallback) and a
// section block.
func slackPayload(m Message) map[string]any {
	text := "*" + slackEscape(m.title()) + "*\n" + slackEscape(m.Message)
	if m.Summary != "" {
		text += "\n" + slackEscape(fmt.Sprintf("%s %s/%s: %s", m.Kind, m.Namespace, m.Name, m.Reason))
	}
	if m.Link != "" {
		text += "\n<" + m.Link + "|Open in the dashboard>"
	}
	return map[string]any{
		"text":   slackEscape(m.title() + ": " + m.Message),
		"blocks": []any{map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}}},
	}
}

// teamsPayload is the message a Teams workflow ("When a Teams webhook request is received")
// posts: one Adaptive Card.
func teamsPayload(m Message) map[string]any {
	color := "Good"
	if m.Severity == string(v1alpha1.SeverityError) {
		color = "Attention"
	}
	card := map[string]any{
		"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
		"type":    "AdaptiveCard",
		"version": "1.4",
		"body": []any{
			// Repository text goes in TextRuns, which Adaptive Cards never read as Markdown (a
			// TextBlock would make [text](url) a link).
			// TextRuns are plain already; Unlinked keeps Teams from linking bare URLs and @names.
			richText(model.Unlinked(m.title()), map[string]any{"weight": "Bolder", "color": color}),
			richText(model.Unlinked(m.Message), nil),
			map[string]any{"type": "FactSet", "facts": []any{
				map[string]any{"title": "Object", "value": m.Kind + " " + m.Namespace + "/" + m.Name},
				map[string]any{"title": "Reason", "value": m.Reason},
			}},
		},
	}
	if m.Link != "" {
		card["actions"] = []any{map[string]any{"type": "Action.OpenUrl", "title": "Open in the dashboard", "url": m.Link}}
	}
	return map[string]any{
		"type":        "message",
		"attachments": []any{map[string]any{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}},
	}
}

// richText is a RichTextBlock of one TextRun of text, with the run's style.
func richText(text string, style map[string]any) map[string]any {
	run := map[string]any{"type": "TextRun", "text": text}
	for k, v := range style {
		run[k] = v
	}
	return map[string]any{"type": "RichTextBlock", "inlines": []any{run}}
}

// cloudEvent is the message as a CloudEvent 1.0 in structured mode.
func cloudEvent(m Message) map[string]any {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return map[string]any{
		"specversion":     "1.0",
		"id":              hex.EncodeToString(id),
		"source":          "flotilla.dev/hub/" + m.Namespace,
		"type":            "dev.flotilla." + strings.ToLower(m.Kind) + "." + m.Reason,
		"subject":         m.Kind + "/" + m.Name,
		"time":            m.Time.Format(time.RFC3339Nano),
		"datacontenttype": "application/json",
		"data":            m,
	}
}

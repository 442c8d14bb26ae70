"""The OpenAPI document names every job event's payload schema (`vocabulary.events`)."""

from fastapi.testclient import TestClient

from vocabulary.events import EVENT_PAYLOADS


def test_the_event_stream_documents_each_payload(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    stream = spec["paths"]["/jobs/{job_id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
    item = stream["itemSchema"]
    assert item["x-payloads"] == {event_type: cls.__name__ for event_type, cls in EVENT_PAYLOADS.items()}
    titles = {schema["title"] for schema in item["properties"]["data"]["contentSchema"]["anyOf"]}
    assert titles == {cls.__name__ for cls in EVENT_PAYLOADS.values()}

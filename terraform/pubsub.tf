# Topics and the subscriptions terraform owns. Pub/Sub is only a doorbell: the
# record in GCS is the queue, so a lost or dead-lettered message costs latency
# (the sweep requeues), never a job.

resource "google_pubsub_topic" "topics" {
  # checkov:skip=CKV_GCP_83:Messages carry job ids and GCS object metadata only, never payloads; Google-managed encryption applies. Set kms_key_name here if your policy demands CMEK.
  # The three, and each pool's doorbell topic (pools.tf): jobs_<pool>, <prefix>-jobs-<pool>.
  for_each = local.all_topics

  name                       = each.value
  project                    = var.project_id
  labels                     = var.labels
  message_retention_duration = each.key == "dead_letter" ? var.dead_letter_retention : null

  depends_on = [time_sleep.apis_propagate]
}

# Push subscriptions into claim and submit_upload, authenticated with an OIDC token
# of the invoker SA; the push path /projects/P/topics/T gives functions-framework a
# faithful CloudEvent source.
resource "google_pubsub_subscription" "push" {
  # claim's and submit_upload's, and each pool's (pools.tf): its own ack deadline and
  # dead-letter attempts, claim's backoff.
  for_each = local.all_pushes

  name                       = each.value.subscription
  project                    = var.project_id
  topic                      = google_pubsub_topic.topics[each.value.topic].id
  ack_deadline_seconds       = each.value.settings.ack_deadline_seconds
  message_retention_duration = "604800s"
  labels                     = var.labels

  push_config {
    push_endpoint = "${google_cloudfunctions2_function.fn[each.key].service_config[0].uri}/projects/${var.project_id}/topics/${google_pubsub_topic.topics[each.value.topic].name}"

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = google_cloudfunctions2_function.fn[each.key].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = each.value.settings.minimum_backoff
    maximum_backoff = each.value.settings.maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.topics["dead_letter"].id
    max_delivery_attempts = each.value.settings.max_delivery_attempts
  }

  expiration_policy {
    ttl = "" # never expire, however quiet the queue is
  }

  # The Pub/Sub agent mints each push's token as the invoker SA and dead-letters into
  # the dead-letter topic from the first delivery on: wait for both grants (iam.tf).
  # Its subscriber role on this subscription and the invoker's run.invoker on the
  # function can only follow; a push refused meanwhile is retried with backoff.
  depends_on = [time_sleep.grants_propagate]
}

# Holds whatever was dead-lettered, for a person or `reclaim` to look at.
resource "google_pubsub_subscription" "dead_letter_hold" {
  name                       = local.subscriptions.dead_letter_hold
  project                    = var.project_id
  topic                      = google_pubsub_topic.topics["dead_letter"].id
  ack_deadline_seconds       = 60
  message_retention_duration = var.dead_letter_retention
  retain_acked_messages      = false
  labels                     = var.labels

  expiration_policy {
    ttl = ""
  }
}

# Upload routes (docs/pipelines.md, "Uploads"): uploads.json in your pipelines package
# (or var.uploads_file), the file `make dev` reads, read here when pipeline_modules names
# a module (your pipelines are deployed); the archives carry it as the package's own. The functions get the same file (the archives carry the
# package) through RECLAIM_UPLOADS_FILE (main.tf) and check it at start exactly
# (shared/submission/upload_routes.py); here terraform makes one storage notification per bucket
# and prefix the routes need, no wider, and refuses a bad route at plan, naming it.
locals {
  uploads_file = (var.uploads_file == "" ? "${local.pipelines_dir}/uploads.json"
  : startswith(var.uploads_file, "/") ? var.uploads_file : abspath("${path.root}/${var.uploads_file}"))
  uploads_routed = length(var.pipeline_modules) > 0 && fileexists(local.uploads_file)
  # the archive path of the file, relative to the folder holding shared/ ("" = no routes)
  uploads_setting = local.uploads_routed ? "${local.pipelines_package}/uploads.json" : ""
  upload_doc      = local.uploads_routed ? jsondecode(file(local.uploads_file)) : {}

  upload_routes   = try(local.upload_doc.routes, [])
  upload_buckets  = try(local.upload_doc.buckets, [])
  upload_unrouted = try(local.upload_doc.unrouted, "upload-digest")

  # Where each route listens (bucket "" = the uploads bucket, also when a route names it:
  # the functions read "" as that bucket, so two names of one bucket would make two
  # overlapping notifications), and the unrouted default: the whole uploads bucket under
  # var.uploads_prefix, unless unrouted is "ignore".
  upload_home = local.buckets.uploads
  upload_route_buckets = [
    for r in local.upload_routes : try(r.bucket, "") == local.upload_home ? "" : try(r.bucket, "")
  ]
  upload_needs = distinct(concat(
    [for i, r in local.upload_routes : { bucket = local.upload_route_buckets[i], prefix = try(r.prefix, "") }],
    local.upload_unrouted == "ignore" ? [] : [{ bucket = "", prefix = var.uploads_prefix }],
  ))
  # One notification per needed prefix, no wider: a prefix that another needed prefix
  # of the same bucket already covers gets none (it would deliver every upload twice).
  upload_notifications = {
    for n in local.upload_needs : "${n.bucket == "" ? "uploads" : n.bucket}:${n.prefix}" => n
    if !anytrue([
      for m in local.upload_needs : m.bucket == n.bucket && m.prefix != n.prefix && startswith(n.prefix, m.prefix)
    ])
  }

  # Plan-time checks, the function's own at start being exact. A pipeline is known when
  # it is built in or its quoted name appears in a module pipeline_modules names.
  upload_module_text = join("\n", [
    for m in var.pipeline_modules :
    try(file("${local.pipelines_dir}/${replace(trimprefix(m, "${local.pipelines_package}."), ".", "/")}.py"), "")
  ])
  # The pipelines every function registers without a module (shared/pipelines).
  builtin_pipelines = ["demo", "upload-digest", "webhook"]
  upload_pipelines = [
    for r in local.upload_routes : concat([try(r.pipeline, "")], try([r.batch.on_complete.pipeline], []))
  ]
  # "up to 10 notification configurations set to trigger for a specific event" per bucket
  # (cloud.google.com/storage/docs/pubsub-notifications): the 11th would fail the apply.
  upload_notification_buckets = distinct([for n in values(local.upload_notifications) : n.bucket])
  upload_bucket_problems = [
    for b in local.upload_notification_buckets :
    "bucket ${b == "" ? local.upload_home : b} needs ${length([for n in values(local.upload_notifications) : n if n.bucket == b])} OBJECT_FINALIZE notifications (routes ${join(", ", [for i, r in local.upload_routes : try(r.name, tostring(i)) if local.upload_route_buckets[i] == b])}); Cloud Storage allows 10 per bucket and event type: share a prefix (one notification covers the routes under it)"
    if length([for n in values(local.upload_notifications) : n if n.bucket == b]) > 10
  ]
  upload_route_problems = flatten([
    local.upload_bucket_problems,
    [
      for b, project in var.upload_bucket_projects : "upload_bucket_projects names bucket ${b}, which uploads.json does not list in buckets"
      if !contains(local.upload_buckets, b)
    ],
    [for i, r in local.upload_routes : concat(
      [
        for p in local.upload_pipelines[i] : "route ${try(r.name, i)}: pipeline \"${p}\" is unknown (built in, or named in a module of pipeline_modules)"
        if !(contains(local.builtin_pipelines, p) || strcontains(local.upload_module_text, "\"${p}\""))
      ],
      try(r.bucket, "") == "" || contains(local.upload_buckets, try(r.bucket, "")) ? [] : [
        "route ${try(r.name, i)}: bucket \"${try(r.bucket, "")}\" is unknown (list it in buckets)"
      ],
      [
        for j, o in local.upload_routes : "route ${try(r.name, i)}: prefix \"${try(r.prefix, "")}\" overlaps route ${try(o.name, j)} in the same bucket"
        if j < i && try(r.bucket, "") == try(o.bucket, "") && (startswith(try(r.prefix, ""), try(o.prefix, "")) || startswith(try(o.prefix, ""), try(r.prefix, ""))) && !(
          (length(try(r.suffixes, [])) > 0 && length(try(o.suffixes, [])) > 0 && !anytrue(flatten([
            for x in try(r.suffixes, []) : [for y in try(o.suffixes, []) : endswith(x, y) || endswith(y, x)]
          ]))) ||
          (length(try(r.content_types, [])) > 0 && length(try(o.content_types, [])) > 0 && length(setintersection(
            [for t in try(r.content_types, []) : lower(t)], [for t in try(o.content_types, []) : lower(t)]
          )) == 0)
        )
      ],
    )],
  ])
}

# Every finished upload under a routed prefix rings the uploads topic; submit_upload
# turns it into the job its route says.
resource "google_storage_notification" "uploads" {
  for_each = local.upload_notifications

  bucket             = each.value.bucket == "" ? google_storage_bucket.uploads.name : each.value.bucket
  topic              = google_pubsub_topic.topics["uploads"].id
  payload_format     = "JSON_API_V1"
  event_types        = ["OBJECT_FINALIZE"]
  object_name_prefix = each.value.prefix == "" ? null : each.value.prefix

  lifecycle {
    precondition {
      condition     = length(local.upload_route_problems) == 0
      error_message = "${local.uploads_file}: ${join("; ", local.upload_route_problems)}"
    }
  }

  # Creating a notification checks that the GCS agent may publish to the topic
  # (registry.terraform.io/providers/hashicorp/google/6.50.0/docs/resources/storage_notification):
  # wait for that grant to propagate (iam.tf).
  depends_on = [time_sleep.grants_propagate]
}

# Deployments from before the routes had one notification, on the whole uploads bucket (or
# under uploads_prefix "", the default): it is the unrouted default's, so keep it.
moved {
  from = google_storage_notification.uploads
  to   = google_storage_notification.uploads["uploads:"]
}

# claim runs the routed pipelines, which read the uploaded objects of the other buckets
# the routes name (the uploads bucket's read is in iam.tf).
resource "google_storage_bucket_iam_member" "claim_reads_routed" {
  for_each = toset(local.upload_buckets)

  bucket = each.value
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.fn["claim"].email}"
}

# A routed bucket in another project: Cloud Storage publishes its notifications as that
# project's own service agent, which must hold pubsub.topics.publish on the topic ("your
# project's Cloud Storage service agent must have the IAM permission
# 'pubsub.topics.publish'", cloud.google.com/sdk/gcloud/reference/storage/buckets/notifications/create).
# var.upload_bucket_projects names those projects; reading each agent creates it if need be
# (as data.google_storage_project_service_account.this does for ours).
data "google_storage_project_service_account" "routed" {
  for_each = toset([for p in values(var.upload_bucket_projects) : p if p != var.project_id])

  project = each.value

  depends_on = [time_sleep.first_apis_propagate]
}

resource "google_pubsub_topic_iam_member" "routed_gcs_agents_publish" {
  for_each = data.google_storage_project_service_account.routed

  project = var.project_id
  topic   = google_pubsub_topic.topics["uploads"].name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${each.value.email_address}"
}

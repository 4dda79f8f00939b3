-- Indexes for the queue scans of the runtime protocol.

-- FetchOrchestrationItem: the oldest visible messages of a tenant.
CREATE INDEX IF NOT EXISTS orchestrator_queue_visible
    ON orchestrator_queue (tenant_id, visible_at, instance_id);

-- FetchWorkItem: the oldest visible task of a tenant's task queue.
CREATE INDEX IF NOT EXISTS worker_queue_visible
    ON worker_queue (tenant_id, task_queue, visible_at);

-- AckOrchestrationItem: delete the rows of cancelled activities (lock stealing).
CREATE INDEX IF NOT EXISTS worker_queue_activity
    ON worker_queue (tenant_id, instance_id, execution_id, activity_id);

-- Children of an instance (cancellation, tree walks, delete).
CREATE INDEX IF NOT EXISTS instances_parent
    ON instances (tenant_id, parent_instance_id) WHERE parent_instance_id IS NOT NULL;

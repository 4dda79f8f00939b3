package api

import (
	"github.com/orchardhq/orchard/pkg/tenancy"
	"github.com/orchardhq/orchard/proto/orchard/v1/orchardv1connect"
)

// access is who may call a procedure.
type access struct {
	// roles: the caller needs one of them.
	roles []tenancy.Role
	// platform marks the Admin service: no tenant of its own, no tenant
	// state or rate checks.
	platform bool
	// read marks reads a suspended tenant's tenant-admin may still make.
	read bool
	// worker marks the calls of a tenant's workers. They draw on a request
	// bucket of their own, so that a tenant starting past its rate cannot
	// starve its workers of the calls that finish what it started (and
	// leave its instances piling up, running).
	worker bool
	// longPoll marks the calls that wait for work to come. They take no
	// slot of Config.CallShare: they would hold it while they wait.
	longPoll bool
	// start marks the calls that start an orchestration: they take a start
	// as well as a request (Limits.StartsPerSecond).
	start bool
}

var (
	clientRole   = []tenancy.Role{tenancy.RoleClient}
	workerRole   = []tenancy.Role{tenancy.RoleWorker}
	adminRole    = []tenancy.Role{tenancy.RoleTenantAdmin}
	platformRole = []tenancy.Role{tenancy.RolePlatformAdmin}
)

// accessRules maps every procedure to who may call it. A procedure missing
// here is refused (fail closed), and a test walks the services'
// descriptors so that a new RPC without a rule fails the suite.
var accessRules = map[string]access{
	orchardv1connect.ClientServiceStartOrchestrationProcedure:  {roles: clientRole, start: true},
	orchardv1connect.ClientServiceRaiseEventProcedure:          {roles: clientRole},
	orchardv1connect.ClientServiceCancelInstanceProcedure:      {roles: clientRole},
	orchardv1connect.ClientServiceGetInstanceProcedure:         {roles: clientRole},
	orchardv1connect.ClientServiceWaitForCompletionProcedure:   {roles: clientRole, longPoll: true},
	orchardv1connect.ClientServiceGetHistoryProcedure:          {roles: clientRole},
	orchardv1connect.ClientServiceListExecutionsProcedure:      {roles: clientRole},
	orchardv1connect.ClientServiceListInstancesProcedure:       {roles: clientRole},
	orchardv1connect.ClientServiceCountInstancesProcedure:      {roles: clientRole},
	orchardv1connect.ClientServiceGetInstanceTreeProcedure:     {roles: clientRole},
	orchardv1connect.ClientServiceDeleteInstanceProcedure:      {roles: clientRole},
	orchardv1connect.ClientServiceDeleteInstancesProcedure:     {roles: clientRole},
	orchardv1connect.ClientServicePruneExecutionsProcedure:     {roles: clientRole},
	orchardv1connect.ClientServicePruneExecutionsBulkProcedure: {roles: clientRole},
	orchardv1connect.ClientServiceGetOperationProcedure:        {roles: clientRole},

	orchardv1connect.WorkerServicePollActivityTaskProcedure:      {roles: workerRole, worker: true, longPoll: true},
	orchardv1connect.WorkerServiceHeartbeatActivityTaskProcedure: {roles: workerRole, worker: true},
	orchardv1connect.WorkerServiceCompleteActivityTaskProcedure:  {roles: workerRole, worker: true},
	orchardv1connect.WorkerServiceFailActivityTaskProcedure:      {roles: workerRole, worker: true},

	// Registering needs tenant-admin; clients read definitions too.
	orchardv1connect.DefinitionServiceRegisterDefinitionProcedure: {roles: adminRole},
	orchardv1connect.DefinitionServiceGetDefinitionProcedure: {
		roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleTenantAdmin}, read: true},
	orchardv1connect.DefinitionServiceListDefinitionsProcedure: {
		roles: []tenancy.Role{tenancy.RoleClient, tenancy.RoleTenantAdmin}, read: true},

	orchardv1connect.TenantServiceGetRetentionPolicyProcedure: {roles: adminRole, read: true},
	orchardv1connect.TenantServiceSetRetentionPolicyProcedure: {roles: adminRole},
	orchardv1connect.TenantServiceGetLimitsProcedure:          {roles: adminRole, read: true},
	orchardv1connect.TenantServiceGetUsageProcedure:           {roles: adminRole, read: true},
	orchardv1connect.TenantServicePreviewRetentionProcedure:   {roles: adminRole, read: true},
	orchardv1connect.TenantServiceListAuditRecordsProcedure:   {roles: adminRole, read: true},

	orchardv1connect.AdminServiceCreateTenantProcedure:     {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceGetTenantProcedure:        {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceListTenantsProcedure:      {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceUpdateTenantProcedure:     {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceMintTokenProcedure:        {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceGetUsageProcedure:         {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceListJanitorRunsProcedure:  {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceTriggerRetentionProcedure: {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceListAuditRecordsProcedure: {roles: platformRole, platform: true},
	orchardv1connect.AdminServiceEraseTenantProcedure:      {roles: platformRole, platform: true},
}

// The find page of farm's compatibility pages (farm/publish/compat.py writes it as compat/find.js):
// filters the wheels by GPU, driver, package, version, CUDA, torch, Python and platform, and shows
// the commands of the wheel that runs on the chosen GPU (SASS before PTX JIT, then the newest). It
// recommends nothing without a GPU, and nothing for a GPU that no wheel runs on: then it says why
// and what would. Each GPU's verdict is the record's (its absence: none of it runs there).
(function(){
var install=window.farmInstall,data=install.data;
var keys=['gpu','package','version','cuda','torch','python','platform'];
var field={package:'project',cuda:'cuda',torch:'torch',python:'python',platform:'platform'};
function value(w,k){return k==='version'?w.version.split('+')[0]:w[field[k]];}  // the version a user asks for: public
var gpus={};data.gpus.forEach(function(g){gpus[g.gpu]=g;});
var wheels=data.wheels.filter(function(w){return w.devices;});
var q=new URLSearchParams(location.search);  // find.html?gpu=8.6&driver=550.54: a link that preselects
function el(id){return document.getElementById(id);}
function add(sel,value,text){var o=document.createElement('option');o.value=value;o.textContent=text;sel.appendChild(o);}
function vkey(v){var p=v.split('+');return p[0].split('.').map(function(n){return parseInt(n,10)||0;}).concat([p[1]||'']);}
function cmp(a,b){for(var i=0;i<Math.max(a.length,b.length);i++){
  var x=a[i]===undefined?-1:a[i],y=b[i]===undefined?-1:b[i];if(x!==y)return x<y?-1:1;}return 0;}
function options(k,rows,initial){
  var s=el(k),keep=(initial?q.get(k):s.value)||'',seen={};
  rows.forEach(function(w){seen[value(w,k)]=1;});
  var values=Object.keys(seen).sort(k==='version'||k==='cuda'||k==='torch'?function(a,b){return cmp(vkey(b),vkey(a));}:undefined);
  s.length=1;values.forEach(function(v){add(s,v,v);});
  if(keep&&values.indexOf(keep)<0){if(!initial)keep='';else add(s,keep,keep+' (none here)');}
  s.value=keep;
}
var gpuSel=el('gpu');
data.gpus.forEach(function(g){add(gpuSel,g.gpu,g.label);});
var asked=q.get('gpu');
if(asked&&!gpus[asked])add(gpuSel,asked,asked+' (not a GPU farm knows)');
if(asked)gpuSel.value=asked;
el('driver').value=q.get('driver')||'';
keys.slice(1).forEach(function(k){options(k,k==='version'?wheels.filter(function(w){
  return !q.get('package')||w.project===q.get('package');}):wheels,true);});

var rank={'sass':2,'ptx-jit':1};
function imageText(d){return {'sass':'SASS','ptx-jit':'JIT'}[d.kind]+' '+d.image+(d.stub_risk?' (stub risk)':'');}
function td(tr,label,text,cls){
  var c=document.createElement('td');c.dataset.label=label;c.textContent=text;if(cls)c.className=cls;tr.appendChild(c);return c;
}
function sentence(parts){return parts.filter(function(p){return p;}).join(' ');}

function render(){
  var gpu=gpuSel.value,info=gpus[gpu];
  var listed=wheels.filter(function(w){
    for(var i=1;i<keys.length;i++){var v=el(keys[i]).value;if(v&&value(w,keys[i])!==v)return false;}
    return true;});
  var drv=el('driver').value.trim(),m=/^(\d{2,4})(\.\d{1,4}){0,3}$/.exec(drv),branch=m?parseInt(m[1],10):null;
  function driverOk(d){return branch===null||!d.driver||parseInt(d.driver,10)<=branch;}
  var image=function(w){return info?w.devices[gpu]:null;};
  var runs=function(w){var d=image(w);return !!d&&driverOk(d)&&!w.unresolved.length;};
  var rows=!gpu?listed:listed.filter(runs);
  rows.sort(function(a,b){  // per package: SASS before JIT, then the newest version and CUDA line
    if(a.project!==b.project)return a.project<b.project?-1:1;
    var d=gpu?rank[image(b).kind]-rank[image(a).kind]:0;
    return d||cmp(vkey(b.version),vkey(a.version))||cmp(vkey(b.cuda),vkey(a.cuda))||(a.filename<b.filename?-1:1);});
  var body=el('rows');body.textContent='';
  rows.forEach(function(w){
    var tr=document.createElement('tr');tr.dataset.filename=w.filename;var d=image(w);
    td(tr,'package',w.project);td(tr,'version',value(w,'version'));td(tr,'CUDA',w.cuda);td(tr,'torch',w.torch);
    td(tr,'Python',w.python);td(tr,'platform',w.platform);
    td(tr,'on this GPU',d?imageText(d):'-',d?d.kind:'');
    td(tr,'minimum driver','>= '+((d&&d.driver)||w.driver));
    var c=td(tr,'install',''),cs=install.commands(w);
    c.appendChild(install.copyButton(cs[0],'pip'));c.appendChild(document.createTextNode(' '));
    c.appendChild(install.copyButton(cs[1],'uv'));
    body.appendChild(tr);});
  el('count').textContent=rows.length+' wheel(s)';
  var box=el('commands'),verdict=el('verdict');box.textContent='';
  if(drv&&!m){verdict.textContent='"'+drv+'" is not a driver version: write it as nvidia-smi prints it (550.54).';return;}
  if(!gpu){verdict.textContent='Pick your GPU: the wheels below are not checked against one.';return;}
  if(!info){
    verdict.textContent=/^\d{1,2}\.\d$/.test(gpu)?
      sentence(['No wheel here is known to run on GPU '+gpu+': no CUDA line farm builds with targets it (they',
        'build for '+data.gpus[0].gpu+' to '+data.gpus[data.gpus.length-1].gpu+'). What would: a wheel with',
        'sm_'+gpu.replace('.','')+' SASS from a CUDA line that knows it, or PTX at or below '+gpu,
        'that its driver compiles at the first launch; farm has checked none for this GPU.']):
      '"'+gpu+'" is not a compute capability: nvidia-smi --query-gpu=compute_cap --format=csv prints yours (like 8.6).';
    return;
  }
  var packages=rows.map(function(w){return w.project;}).filter(function(p,i,all){return all.indexOf(p)===i;});
  if(packages.length>1){
    verdict.textContent=rows.length+' wheel(s) of '+packages.length+' packages run on '+info.label+
      ': pick a package for the one to install.';
    return;
  }
  if(rows.length){
    var best=rows[0],b=image(best);
    verdict.textContent=best.filename+' runs on '+info.label+' as '+({'sass':'SASS','ptx-jit':'PTX JIT'}[b.kind])+
      ' ('+b.image+(b.stub_risk?', stub risk: code gated above it is compiled out':'')+'), driver >= '+b.driver+'.';
    install.fill(box,best);
    return;
  }
  var tie=info.tie,why=[],elsewhere=wheels.filter(runs).length,
      slow=listed.filter(function(w){return image(w)&&!driverOk(image(w));}),
      stuck=listed.filter(function(w){return image(w)&&w.unresolved.length;});
  if(tie&&tie.platform===null)why.push(tie.why+'.');
  else if(tie)why.push(tie.system+' runs '+tie.platform+' wheels'+(tie.first_cuda?' of CUDA '+tie.first_cuda+' or newer':'')+
    ' only ('+tie.why+'); its driver: '+tie.driver+'.');
  if(slow.length)why.push(slow.length+' wheel(s) run there with a newer driver (>= '+image(slow[0]).driver+').');
  if(stuck.length)why.push(stuck.length+' wheel(s) run there but require farm projects their channel does not hold.');
  if(elsewhere)why.push(elsewhere+' wheel(s) run there with other filters.');
  var would=tie?tie.instead:('a build with sm_'+gpu.replace('.','')+' SASS'+(info.lines.length?
    ' (CUDA '+info.lines.join(', ')+' can build it)':'')+', or with PTX at or below '+gpu);
  verdict.textContent=sentence(['No wheel here runs on '+info.label+'.'].concat(why,['What would: '+would+'.']));
}
keys.forEach(function(k){el(k).addEventListener('change',function(){
  if(k==='package')options('version',wheels.filter(function(w){return !el('package').value||w.project===el('package').value;}));
  render();});});
el('driver').addEventListener('input',render);
render();
})();

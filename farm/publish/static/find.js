// The find page of farm's compatibility pages (farm/publish/compat.py writes it as compat/find.js):
// filters the wheels in the page's JSON by GPU, CUDA, torch, Python and platform; shows the pip and
// uv commands of the best match (SASS before PTX JIT) for the index the page is served from.
(function(){
var data=JSON.parse(document.getElementById('farm-wheels').textContent);
var root=new URL(document.body.dataset.root,location.href).href;
var keys=['gpu','cuda','torch','python','platform'];
function sel(k){return document.getElementById(k).value;}
function fill(k,values){var s=document.getElementById(k);values.forEach(function(v){
  var o=document.createElement('option');o.value=v;o.textContent=(k==='gpu'?v+' '+data.gpus[v]:v);s.appendChild(o);});}
function uniq(k){var seen={};data.wheels.forEach(function(w){if(w[k])seen[w[k]]=1;});return Object.keys(seen).sort();}
fill('gpu',Object.keys(data.gpus));['cuda','torch','python','platform'].forEach(function(k){fill(k,uniq(k));});
function cmd(tool,w){return tool+' install --index-url '+root+w.channel+'/ \''+w.project+'=='+w.version+'\'';}
function td(tr,text,cls){
  var c=document.createElement('td');c.textContent=text;if(cls)c.className=cls;
  tr.appendChild(c);return c;
}
var rank={'sass':2,'ptx-jit':1,'none':0};
function render(){
  var gpu=sel('gpu');
  var rows=data.wheels.filter(function(w){
    if(!w.devices)return false;
    for(var i=1;i<keys.length;i++){var v=sel(keys[i]);if(v&&w[keys[i]]!==v)return false;}
    return !gpu||w.devices[gpu].kind!=='none';});
  if(gpu)rows.sort(function(a,b){return rank[b.devices[gpu].kind]-rank[a.devices[gpu].kind];});
  var body=document.getElementById('rows');body.textContent='';
  rows.forEach(function(w){var tr=document.createElement('tr');tr.dataset.filename=w.filename;
    td(tr,w.project);td(tr,w.version);td(tr,w.channel);td(tr,w.python);td(tr,w.platform);
    var d=gpu?w.devices[gpu]:null;
    td(tr,d?({'sass':'SASS','ptx-jit':'JIT'}[d.kind]+' '+d.image+(d.stub_risk?' (stub risk)':'')):'-',d?d.kind:'');
    td(tr,'>= '+(d?d.driver:w.driver));
    var c=td(tr,'');var code=document.createElement('code');code.textContent=cmd('pip',w);c.appendChild(code);
    body.appendChild(tr);});
  document.getElementById('count').textContent=rows.length+' wheel(s)';
  var best=rows[0];
  document.getElementById('pip').textContent=best?cmd('pip',best):'';
  document.getElementById('uv').textContent=best?cmd('uv pip',best):'';
  document.getElementById('verdict').textContent=best?(gpu?best.filename+' runs on '+gpu+' as '+
    ({'sass':'SASS','ptx-jit':'PTX JIT'}[best.devices[gpu].kind])+' ('+best.devices[gpu].image+'), driver >= '+
    best.devices[gpu].driver:best.filename):
    (gpu?'No wheel here runs on GPU '+gpu+' with these filters.':'No wheel matches.');
}
var q=new URLSearchParams(location.search);  // find.html?gpu=8.6&torch=2.8: a link that preselects
keys.forEach(function(k){
  var s=document.getElementById(k);if(q.get(k))s.value=q.get(k);s.addEventListener('change',render);
});
render();
})();
